/**
 * Client SDK for session files; `client.files` (`SessionFiles`) has them all for its session.
 * - Over JSON-RPC (an `ExecServerClient` or an `RpcConnection`): `readFile`, `writeFile` (one
 *   message each, bounded by the server's fs/readFile maximum), and `readFileChunked` /
 *   `writeFileChunked` (fs/open + fs/readBlock, fs/openWrite + fs/writeBlock: any size, a block
 *   at a time).
 * - Over HTTP (`HttpFiles`): streamed `upload` / `download` plus metadata, list, remove, copy,
 *   mkdir. Streams are piped with backpressure; nothing is held whole in memory.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { DirectoryEntry, FileMetadata, MethodName, MethodParams, MethodResult } from '../protocol/index.ts';
import { ExecServerHttpError } from './errors.ts';
import { httpBaseOf } from './http.ts';

export type { DirectoryEntry, FileMetadata } from '../protocol/index.ts';

// ---- JSON-RPC ------------------------------------------------------------------------

/** Where the JSON-RPC calls go: an `ExecServerClient` (which follows its resumes) or an `RpcConnection`. */
export interface FileRpc {
  request<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>>;
}

/** Reads a whole file with `fs/readFile` (fails with EXEC_ERR_TOO_LARGE past the server maximum). */
export async function readFile(conn: FileRpc, path: string): Promise<Buffer> {
  const r = await conn.request('fs/readFile', { path });
  return Buffer.from(r.dataBase64, 'base64');
}

/** Writes a whole file with `fs/writeFile` (created or truncated). */
export async function writeFile(conn: FileRpc, path: string, data: Buffer | string): Promise<void> {
  await conn.request('fs/writeFile', { path, dataBase64: Buffer.from(data).toString('base64') });
}

/** Reads a file of any size in blocks (`fs/open`, `fs/readBlock`, `fs/close`). */
export async function* readFileChunked(
  conn: FileRpc,
  path: string,
  blockBytes = 4 * 1024 * 1024,
): AsyncGenerator<Buffer> {
  const { handleId } = await conn.request('fs/open', { path });
  try {
    for (let offset = 0; ; ) {
      const block = await conn.request('fs/readBlock', { handleId, offset, len: blockBytes });
      const chunk = Buffer.from(block.chunk, 'base64');
      if (chunk.length > 0) yield chunk;
      offset += chunk.length;
      if (block.eof) return;
    }
  } finally {
    await conn.request('fs/close', { handleId }).catch(() => undefined);
  }
}

/** Writes a file of any size in blocks (`fs/openWrite`, `fs/writeBlock`, `fs/closeWrite`); resolves with the bytes written. */
export async function writeFileChunked(
  conn: FileRpc,
  path: string,
  source: AsyncIterable<Buffer | string> | Buffer,
  blockBytes = 4 * 1024 * 1024,
): Promise<number> {
  const { handleId } = await conn.request('fs/openWrite', { path });
  try {
    const send = (b: Buffer): Promise<unknown> =>
      conn.request('fs/writeBlock', { handleId, chunk: b.toString('base64') });
    const iterable = Buffer.isBuffer(source) ? [source] : source;
    for await (const piece of iterable) {
      const buf = Buffer.from(piece);
      for (let off = 0; off < buf.length; off += blockBytes) await send(buf.subarray(off, off + blockBytes));
    }
    const { bytesWritten } = await conn.request('fs/closeWrite', { handleId });
    return bytesWritten;
  } catch (err) {
    await conn.request('fs/close', { handleId }).catch(() => undefined);
    throw err;
  }
}

// ---- HTTP ----------------------------------------------------------------------------

/** Where `HttpFiles` sends its requests: the server, the token and the session. */
export interface HttpFilesOptions {
  /** `http(s)://host:port` of the server; a `ws(s)://` URL is accepted and converted. */
  readonly baseUrl: string;
  readonly token?: string | undefined;
  readonly sessionId: string;
}

/** A session's files over HTTP: streamed upload and download, plus metadata, list, remove, copy, mkdir. */
export class HttpFiles {
  readonly #base: string;
  readonly #token: string | undefined;
  readonly #prefix: string;

  constructor(opts: HttpFilesOptions) {
    this.#base = httpBaseOf(opts.baseUrl);
    this.#token = opts.token;
    this.#prefix = `/v1/sessions/${encodeURIComponent(opts.sessionId)}/files`;
  }

  #url(sub: string, query: Record<string, string | number | boolean | undefined>): URL {
    const url = new URL(`${this.#base}${this.#prefix}${sub}`);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  /** One request; `body` is piped (streamed). Resolves with the response once its headers arrived. */
  #send(
    method: string,
    url: URL,
    body?: { stream: NodeJS.ReadableStream; type: string } | { json: unknown },
  ): Promise<IncomingMessage> {
    const headers: Record<string, string> = {};
    if (this.#token) headers['authorization'] = `Bearer ${this.#token}`;
    let payload: Buffer | undefined;
    if (body && 'json' in body) {
      payload = Buffer.from(JSON.stringify(body.json));
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(payload.length);
    } else if (body) {
      headers['content-type'] = body.type;
    }
    const make = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = make(url, { method, headers }, resolve);
      req.on('error', reject);
      if (body && 'stream' in body) {
        pipeline(body.stream, req).catch((err: unknown) => {
          req.destroy(err as Error);
          reject(err);
        });
      } else {
        req.end(payload);
      }
    });
  }

  async #json<T>(res: IncomingMessage): Promise<T> {
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    let parsed: unknown;
    try {
      parsed = text === '' ? {} : JSON.parse(text);
    } catch {
      parsed = { message: text };
    }
    if ((res.statusCode ?? 500) >= 400)
      throw ExecServerHttpError.of(res.statusCode ?? 500, parsed, `HTTP ${res.statusCode ?? 500}`);
    return parsed as T;
  }

  /** Streams `source` into `path` in the session (created or truncated). */
  async upload(path: string, source: NodeJS.ReadableStream | Buffer): Promise<{ path: string; bytesWritten: number }> {
    const stream = Buffer.isBuffer(source) ? Readable.from(source.length ? [source] : []) : source;
    const res = await this.#send('PUT', this.#url('/content', { path }), { stream, type: 'application/octet-stream' });
    return this.#json(res);
  }

  /** The file's bytes as a stream (starting at `offset`); check the status before reading. */
  async downloadStream(path: string, offset?: number): Promise<{ stream: Readable; size: number | undefined }> {
    const res = await this.#send('GET', this.#url('/content', { path, offset }));
    if ((res.statusCode ?? 500) >= 400) return this.#json<never>(res);
    const len = res.headers['content-length'];
    return { stream: res, size: len === undefined ? undefined : Number(len) };
  }

  /** Streams the file into `dest`; resolves with the bytes received (checked against Content-Length). */
  async download(path: string, dest: NodeJS.WritableStream, offset?: number): Promise<number> {
    const { stream, size } = await this.downloadStream(path, offset);
    let bytes = 0;
    stream.on('data', (c: Buffer) => (bytes += c.length));
    await pipeline(stream, dest as Writable);
    if (size !== undefined && bytes !== size)
      throw new ExecServerHttpError(
        502,
        'EXEC_ERR_BACKEND',
        `download of ${path} ended after ${bytes} of ${size} bytes`,
      );
    return bytes;
  }

  async stat(path: string): Promise<FileMetadata> {
    return this.#json(await this.#send('GET', this.#url('/metadata', { path })));
  }

  async list(path: string): Promise<DirectoryEntry[]> {
    return (await this.#json<{ entries: DirectoryEntry[] }>(await this.#send('GET', this.#url('/list', { path }))))
      .entries;
  }

  async canonicalize(path: string): Promise<string> {
    return (await this.#json<{ path: string }>(await this.#send('GET', this.#url('/canonical', { path })))).path;
  }

  async remove(path: string, opts: { recursive?: boolean; force?: boolean } = {}): Promise<void> {
    await this.#json(await this.#send('DELETE', this.#url('', { path, recursive: opts.recursive, force: opts.force })));
  }

  async copy(sourcePath: string, destinationPath: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.#json(
      await this.#send('POST', this.#url('/copy', {}), {
        json: { sourcePath, destinationPath, recursive: opts.recursive === true },
      }),
    );
  }

  async mkdir(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.#json(
      await this.#send('POST', this.#url('/mkdir', {}), { json: { path, recursive: opts.recursive === true } }),
    );
  }
}

/**
 * The files of one session, as `client.files`: whole files in one JSON-RPC message (`readFile`,
 * `writeFile`, on the client's current connection), streams over HTTP (`upload`, `download`,
 * `downloadStream`: any size) and `stat`, `list`, `mkdir`, `remove`, `copy`, `canonicalize`.
 */
export class SessionFiles extends HttpFiles {
  readonly #rpc: FileRpc;

  constructor(opts: HttpFilesOptions, rpc: FileRpc) {
    super(opts);
    this.#rpc = rpc;
  }

  /** The whole file (up to the server's fs/readFile maximum, 64 MiB by default; `download` streams any size). */
  readFile(path: string): Promise<Buffer> {
    return readFile(this.#rpc, path);
  }

  /** Writes the whole file (created or truncated; `upload` streams any size). */
  writeFile(path: string, data: Buffer | string): Promise<void> {
    return writeFile(this.#rpc, path, data);
  }
}
