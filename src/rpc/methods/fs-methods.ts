/**
 * `fs/*` methods: Codex's names, params and result fields (reference section 5), plus the
 * marked extensions (chunked writes, `fs/unwatch`). Every operation goes through
 * `SessionFiles`, which maps and canonicalizes the path and checks it against the session
 * sandbox, narrowed (never widened) by the call's Codex `sandbox` object.
 */
import { pathToFileURL } from 'node:url';
import { Type, type TSchema } from 'typebox';
import { execError, ExecServerError } from '../../errors.ts';
import type { SandboxNarrowing } from '../../policy/sandbox-policy.ts';
import { SessionFiles } from '../../sessions/files/session-files.ts';
import type { Connection } from '../connection.ts';
import { defineMethod, type MethodTable } from '../method-table.ts';
import { Base64Schema, Opt, Params, PathSchema } from '../schemas.ts';
import { narrowingFromCodexSandbox } from './codex-sandbox.ts';

const SandboxParam = Opt(Type.Record(Type.String(), Type.Unknown()));
const HandleId = Type.Union([Type.String({ minLength: 1, maxLength: 256 }), Type.Integer({ minimum: 0 })]);
const WatchId = Type.Union([Type.String({ minLength: 1, maxLength: 256 }), Type.Integer()]);

/** Codex's text for a missing path (what its own executor answers); the path goes in `error.data.path`. */
const NOT_FOUND_MESSAGE = 'No such file or directory (os error 2)';

function files(conn: Connection): SessionFiles {
  return SessionFiles.for(conn.session, { maxReadBytes: conn.deps.config.fsMaxReadBytes });
}

function narrowing(conn: Connection, sandbox: Record<string, unknown> | null | undefined): SandboxNarrowing | undefined {
  if (!sandbox) return undefined;
  return narrowingFromCodexSandbox(sandbox, conn.session);
}

/** Decodes a base64 field, rejecting what is not standard padded base64 (-32602). */
export function decodeBase64(value: string, field: string): Buffer {
  if (value.length % 4 !== 0) throw execError('EXEC_ERR_INVALID_PARAMS', `invalid params: ${field}: not valid base64 (length ${value.length} is not a multiple of 4)`, { detail: { field } });
  return Buffer.from(value, 'base64');
}

/** Not-found errors in Codex's words; everything else as the registry has it. */
function rethrow(err: unknown, path: string): never {
  if (err instanceof ExecServerError && err.code === 'EXEC_ERR_NOT_FOUND') {
    throw execError('EXEC_ERR_NOT_FOUND', NOT_FOUND_MESSAGE, { cause: err, detail: { path, reason: err.message } });
  }
  throw err;
}

function fsMethod<S extends TSchema, R>(table: MethodTable<Connection>, name: string, schema: S, pathOf: (p: never) => string, run: (p: never, conn: Connection) => Promise<R>): void {
  table.add(
    name,
    defineMethod({
      requires: 'initialized',
      schema,
      async handler(params, conn) {
        try {
          return await run(params as never, conn);
        } catch (err) {
          rethrow(err, pathOf(params as never));
        }
      },
    }),
  );
}

type PathP = { path: string; sandbox?: Record<string, unknown> | null };

export function registerFsMethods(table: MethodTable<Connection>): void {
  const byPath = (p: PathP): string => p.path;

  fsMethod(table, 'fs/readFile', Params({ path: PathSchema, sandbox: SandboxParam }), byPath, async (p: PathP, conn) => {
    const f = files(conn);
    const data = await f.readFile(f.resolvePath(p.path), narrowing(conn, p.sandbox));
    return { dataBase64: data.toString('base64') };
  });

  fsMethod(table, 'fs/writeFile', Params({ path: PathSchema, dataBase64: Base64Schema, sandbox: SandboxParam }), byPath, async (p: PathP & { dataBase64: string }, conn) => {
    const f = files(conn);
    const data = decodeBase64(p.dataBase64, 'dataBase64');
    await f.writeFile(f.resolvePath(p.path), data, narrowing(conn, p.sandbox));
    return {};
  });

  fsMethod(table, 'fs/createDirectory', Params({ path: PathSchema, recursive: Opt(Type.Boolean()), sandbox: SandboxParam }), byPath, async (p: PathP & { recursive?: boolean | null }, conn) => {
    const f = files(conn);
    await f.createDirectory(f.resolvePath(p.path), p.recursive === true, narrowing(conn, p.sandbox));
    return {};
  });

  fsMethod(table, 'fs/getMetadata', Params({ path: PathSchema, sandbox: SandboxParam }), byPath, async (p: PathP, conn) => {
    const f = files(conn);
    const m = await f.getMetadata(f.resolvePath(p.path), narrowing(conn, p.sandbox));
    return { isDirectory: m.isDirectory, isFile: m.isFile, isSymlink: m.isSymlink, size: m.size, createdAtMs: m.createdAtMs, modifiedAtMs: m.modifiedAtMs };
  });

  fsMethod(table, 'fs/canonicalize', Params({ path: PathSchema, sandbox: SandboxParam }), byPath, async (p: PathP, conn) => {
    const f = files(conn);
    const canonical = f.clientPath(p.path, await f.canonicalize(f.resolvePath(p.path), narrowing(conn, p.sandbox)));
    // Answer in the form asked: a URI for a URI, a native path for a native path.
    return { path: p.path.startsWith('file://') ? pathToFileURL(canonical).href : canonical };
  });

  fsMethod(table, 'fs/readDirectory', Params({ path: PathSchema, sandbox: SandboxParam }), byPath, async (p: PathP, conn) => {
    const f = files(conn);
    const entries = await f.readDirectory(f.resolvePath(p.path), narrowing(conn, p.sandbox));
    return { entries: entries.map((e) => ({ fileName: e.fileName, isDirectory: e.isDirectory, isFile: e.isFile })) };
  });

  fsMethod(
    table,
    'fs/remove',
    Params({ path: PathSchema, recursive: Opt(Type.Boolean()), force: Opt(Type.Boolean()), sandbox: SandboxParam }),
    byPath,
    async (p: PathP & { recursive?: boolean | null; force?: boolean | null }, conn) => {
      const f = files(conn);
      await f.remove(f.resolvePath(p.path), p.recursive === true, p.force === true, narrowing(conn, p.sandbox));
      return {};
    },
  );

  type CopyP = { sourcePath: string; destinationPath: string; recursive: boolean; sandbox?: Record<string, unknown> | null };
  fsMethod(
    table,
    'fs/copy',
    Params({ sourcePath: PathSchema, destinationPath: PathSchema, recursive: Type.Boolean(), sandbox: SandboxParam }),
    (p: CopyP) => p.sourcePath,
    async (p: CopyP, conn) => {
      const f = files(conn);
      await f.copy(f.resolvePath(p.sourcePath, 'sourcePath'), f.resolvePath(p.destinationPath, 'destinationPath'), p.recursive, narrowing(conn, p.sandbox));
      return {};
    },
  );

  // ---- chunked reads (Codex's crate-internal fs/open, fs/readBlock, fs/close) ----
  type OpenP = PathP & { handleId?: string | number | null };
  fsMethod(table, 'fs/open', Params({ handleId: Opt(HandleId), path: PathSchema, sandbox: SandboxParam }), byPath, async (p: OpenP, conn) => {
    const f = files(conn);
    const id = await f.openRead(f.resolvePath(p.path), p.handleId == null ? undefined : String(p.handleId), narrowing(conn, p.sandbox));
    return { handleId: p.handleId ?? id };
  });

  type BlockP = { handleId: string | number; offset: number; len: number };
  fsMethod(
    table,
    'fs/readBlock',
    Params({ handleId: HandleId, offset: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }), len: Type.Integer({ minimum: 0 }) }),
    (p: BlockP) => `handle ${p.handleId}`,
    async (p: BlockP, conn) => {
      const block = await files(conn).readBlock(String(p.handleId), p.offset, p.len);
      return { chunk: block.chunk.toString('base64'), eof: block.eof };
    },
  );

  fsMethod(table, 'fs/close', Params({ handleId: HandleId }), (p: { handleId: string | number }) => `handle ${p.handleId}`, async (p: { handleId: string | number }, conn) => {
    await files(conn).closeHandle(String(p.handleId));
    return {};
  });

  // ---- chunked writes (extension) ----
  fsMethod(table, 'fs/openWrite', Params({ handleId: Opt(HandleId), path: PathSchema, sandbox: SandboxParam }), byPath, async (p: OpenP, conn) => {
    const f = files(conn);
    const id = await f.openWrite(f.resolvePath(p.path), p.handleId == null ? undefined : String(p.handleId), narrowing(conn, p.sandbox));
    return { handleId: p.handleId ?? id };
  });

  type WriteBlockP = { handleId: string | number; chunk: string };
  fsMethod(table, 'fs/writeBlock', Params({ handleId: HandleId, chunk: Base64Schema }), (p: WriteBlockP) => `handle ${p.handleId}`, async (p: WriteBlockP, conn) => {
    const bytesWritten = await files(conn).writeBlock(String(p.handleId), decodeBase64(p.chunk, 'chunk'));
    return { bytesWritten };
  });

  fsMethod(table, 'fs/closeWrite', Params({ handleId: HandleId }), (p: { handleId: string | number }) => `handle ${p.handleId}`, async (p: { handleId: string | number }, conn) => {
    return { bytesWritten: await files(conn).closeWrite(String(p.handleId)) };
  });

  // ---- watches ----
  type WatchP = { watchId: string | number; missing?: string[] | null; present?: string | string[] | null };
  fsMethod(
    table,
    'fs/watchMissing',
    Params({ watchId: WatchId, missing: Opt(Type.Array(PathSchema, { maxItems: 1024 })), present: Opt(Type.Union([PathSchema, Type.Array(PathSchema, { maxItems: 1024 })])) }),
    (p: WatchP) => `watch ${p.watchId}`,
    async (p: WatchP, conn) => {
      const f = files(conn);
      const present = p.present == null ? [] : Array.isArray(p.present) ? p.present : [p.present];
      await f.watchMissing(
        p.watchId,
        (p.missing ?? []).map((m) => f.resolvePath(m, 'missing')),
        present.map((m) => f.resolvePath(m, 'present')),
        conn,
      );
      return { watching: true };
    },
  );

  fsMethod(table, 'fs/unwatch', Params({ watchId: WatchId }), (p: { watchId: string | number }) => `watch ${p.watchId}`, async (p: { watchId: string | number }, conn) => {
    return { watching: false, removed: files(conn).unwatch(p.watchId) };
  });
}
