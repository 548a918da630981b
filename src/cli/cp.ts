/**
 * `exec-server cp [--url U] [--token T] SESSION:REMOTE LOCAL` (download) and
 * `exec-server cp [--url U] [--token T] LOCAL SESSION:REMOTE` (upload), streamed over HTTP.
 * REMOTE is an absolute path (or file:// URI) in the session; LOCAL `-` is stdout / stdin.
 * A download into an existing local directory keeps the remote name; an upload to a REMOTE
 * ending in `/` keeps the local name. Downloads land in a temporary file renamed at the end,
 * so a failed copy never leaves a truncated LOCAL behind.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { ExecServerHttpError } from '../client/errors.ts';
import { HttpFiles } from '../client/files.ts';
import { DEFAULT_URL } from './common.ts';

const USAGE = `Usage:
  exec-server cp [--url URL] [--token TOKEN] SESSION:REMOTE LOCAL   download
  exec-server cp [--url URL] [--token TOKEN] LOCAL SESSION:REMOTE   upload
REMOTE is absolute (or a file:// URI); LOCAL "-" means stdout / stdin.
--url defaults to $EXEC_SERVER_URL, else ws://127.0.0.1:8765 (ws:// and http:// both work);
--token defaults to $EXEC_SERVER_TOKEN, else $CODEX_EXEC_SERVER_CONNECTION_TOKEN.`;

interface RemoteRef {
  readonly sessionId: string;
  readonly path: string;
}

/** `SESSION:/abs/path` or `SESSION:file:///abs/path`; anything else is local. */
export function parseRemote(arg: string): RemoteRef | undefined {
  const m = /^([A-Za-z0-9][A-Za-z0-9_.-]{0,127}):(\/.*|file:\/\/.*)$/.exec(arg);
  if (!m || m[1] === undefined || m[2] === undefined) return undefined;
  return { sessionId: m[1], path: m[2] };
}

/** `exec-server cp`: copies one file to or from a session, streamed over HTTP. */
export async function cpCommand(args: string[]): Promise<number> {
  let values: { url?: string | undefined; token?: string | undefined; help?: boolean | undefined };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args,
      options: { url: { type: 'string' }, token: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    }));
  } catch (err) {
    process.stderr.write(`exec-server cp: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const [a, b] = positionals;
  if (positionals.length !== 2 || a === undefined || b === undefined) {
    process.stderr.write(`exec-server cp: expected a source and a destination\n${USAGE}\n`);
    return 2;
  }
  const ra = parseRemote(a);
  const rb = parseRemote(b);
  if ((ra === undefined) === (rb === undefined)) {
    process.stderr.write(`exec-server cp: exactly one of the two must be SESSION:/absolute/path\n${USAGE}\n`);
    return 2;
  }
  const url = values.url ?? process.env['EXEC_SERVER_URL'] ?? DEFAULT_URL;
  const token = values.token ?? process.env['EXEC_SERVER_TOKEN'] ?? process.env['CODEX_EXEC_SERVER_CONNECTION_TOKEN'];
  try {
    if (ra) {
      const files = new HttpFiles({ baseUrl: url, token, sessionId: ra.sessionId });
      const bytes = await download(files, ra.path, b);
      if (b !== '-') process.stderr.write(`${a} -> ${b}: ${bytes} bytes\n`);
    } else if (rb) {
      const files = new HttpFiles({ baseUrl: url, token, sessionId: rb.sessionId });
      const remote = rb.path.endsWith('/') && a !== '-' ? `${rb.path}${basename(a)}` : rb.path;
      const source = a === '-' ? process.stdin : createReadStream(a);
      const opened =
        a === '-'
          ? Promise.resolve()
          : new Promise<void>((resolve, reject) => source.once('open', () => resolve()).once('error', reject));
      await opened;
      const r = await files.upload(remote, source);
      process.stderr.write(`${a} -> ${rb.sessionId}:${remote}: ${r.bytesWritten} bytes\n`);
    }
    return 0;
  } catch (err) {
    const e = err as Error & { code?: string };
    const code = err instanceof ExecServerHttpError ? ` (${err.code})` : e.code ? ` (${e.code})` : '';
    process.stderr.write(`exec-server cp: ${e.message}${code}\n`);
    return 1;
  }
}

async function download(files: HttpFiles, remote: string, local: string): Promise<number> {
  if (local === '-') return files.download(remote, process.stdout);
  let target = local;
  const info = await stat(local).catch(() => undefined);
  if (info?.isDirectory()) target = join(local, basename(remote.replace(/^file:\/\//, '')));
  const partial = join(dirname(target), `.${basename(target)}.part-${process.pid}`);
  try {
    const bytes = await files.download(remote, createWriteStream(partial));
    await rename(partial, target);
    return bytes;
  } catch (err) {
    await rm(partial, { force: true });
    throw err;
  }
}
