/**
 * `fs/*` methods: Codex's names, params and result fields (reference section 5), plus the
 * marked extensions (chunked writes, `fs/unwatch`). Every operation goes through
 * `SessionFiles`, which maps and canonicalizes the path and checks it against the session
 * sandbox, narrowed (never widened) by the call's Codex `sandbox` object.
 */
import { pathToFileURL } from 'node:url';
import { execError, ExecServerError } from '../../errors.ts';
import type { SandboxNarrowing } from '../../policy/sandbox-policy.ts';
import type { SessionFiles } from '../../sessions/files/session-files.ts';
import type { Connection } from '../connection.ts';
import type { MethodName, MethodParams } from '../../protocol/index.ts';
import type { MethodHandler, MethodTable } from '../method-table.ts';
import { narrowingFromCodexSandbox } from './codex-sandbox.ts';

/** Codex's text for a missing path (what its own executor answers); the path goes in `error.data.path`. */
const NOT_FOUND_MESSAGE = 'No such file or directory (os error 2)';

const files = (conn: Connection): SessionFiles => conn.session.files;

function narrowing(
  conn: Connection,
  sandbox: Record<string, unknown> | null | undefined,
): SandboxNarrowing | undefined {
  if (!sandbox) return undefined;
  return narrowingFromCodexSandbox(sandbox, conn.session);
}

/** Decodes a base64 field, rejecting what is not standard padded base64 (-32602). */
export function decodeBase64(value: string, field: string): Buffer {
  if (value.length % 4 !== 0)
    throw execError(
      'EXEC_ERR_INVALID_PARAMS',
      `invalid params: ${field}: not valid base64 (length ${value.length} is not a multiple of 4)`,
      { detail: { field } },
    );
  return Buffer.from(value, 'base64');
}

/** Not-found errors in Codex's words; everything else as the registry has it. */
function rethrow(err: unknown, path: string): never {
  if (err instanceof ExecServerError && err.code === 'EXEC_ERR_NOT_FOUND') {
    throw execError('EXEC_ERR_NOT_FOUND', NOT_FOUND_MESSAGE, { cause: err, detail: { path, reason: err.message } });
  }
  throw err;
}

type FsMethod = Extract<MethodName, `fs/${string}`>;

/** Registers an `fs/*` method whose not-found errors name `pathOf(params)` in Codex's words. */
function fsMethod<M extends FsMethod>(
  table: MethodTable<Connection>,
  name: M,
  pathOf: (p: MethodParams<M>) => string,
  run: MethodHandler<M, Connection>,
): void {
  table.add(name, async (params, conn, signal) => {
    try {
      return await run(params, conn, signal);
    } catch (err) {
      rethrow(err, pathOf(params));
    }
  });
}

const byPath = (p: { path: string }): string => p.path;
const byHandle = (p: { handleId: string | number }): string => `handle ${p.handleId}`;
const byWatch = (p: { watchId: string | number }): string => `watch ${p.watchId}`;

/** `fs/open` and `fs/openWrite` (the same params and answer): a handle under the id the client chose, else a new one. */
function openHandle(open: 'openRead' | 'openWrite'): MethodHandler<'fs/open' | 'fs/openWrite', Connection> {
  return async (p, conn) => {
    const f = files(conn);
    const id = await f[open](
      conn.owner,
      f.resolvePath(p.path),
      p.handleId == null ? undefined : String(p.handleId),
      narrowing(conn, p.sandbox),
    );
    return { handleId: p.handleId ?? id };
  };
}

/** Registers the `fs/*` methods on the table. */
export function registerFsMethods(table: MethodTable<Connection>): void {
  pathMethods(table);
  handleMethods(table);
}

/** The methods that name a path (`fs/copy` is with the handles, for length). */
function pathMethods(table: MethodTable<Connection>) {
  fsMethod(table, 'fs/readFile', byPath, async (p, conn) => {
    const f = files(conn);
    const data = await f.readFile(f.resolvePath(p.path), narrowing(conn, p.sandbox));
    return { dataBase64: data.toString('base64') };
  });

  fsMethod(table, 'fs/writeFile', byPath, async (p, conn) => {
    const f = files(conn);
    const data = decodeBase64(p.dataBase64, 'dataBase64');
    await f.writeFile(f.resolvePath(p.path), data, narrowing(conn, p.sandbox));
    return {};
  });

  fsMethod(table, 'fs/createDirectory', byPath, async (p, conn) => {
    const f = files(conn);
    await f.createDirectory(f.resolvePath(p.path), p.recursive === true, narrowing(conn, p.sandbox));
    return {};
  });

  fsMethod(table, 'fs/getMetadata', byPath, async (p, conn) => {
    const f = files(conn);
    const m = await f.getMetadata(f.resolvePath(p.path), narrowing(conn, p.sandbox));
    return {
      isDirectory: m.isDirectory,
      isFile: m.isFile,
      isSymlink: m.isSymlink,
      size: m.size,
      createdAtMs: m.createdAtMs,
      modifiedAtMs: m.modifiedAtMs,
    };
  });

  fsMethod(table, 'fs/canonicalize', byPath, async (p, conn) => {
    const f = files(conn);
    const canonical = f.clientPath(p.path, await f.canonicalize(f.resolvePath(p.path), narrowing(conn, p.sandbox)));
    // Answer in the form asked: a URI for a URI, a native path for a native path.
    return { path: p.path.startsWith('file://') ? pathToFileURL(canonical).href : canonical };
  });

  fsMethod(table, 'fs/readDirectory', byPath, async (p, conn) => {
    const f = files(conn);
    const entries = await f.readDirectory(f.resolvePath(p.path), narrowing(conn, p.sandbox));
    return { entries: entries.map((e) => ({ fileName: e.fileName, isDirectory: e.isDirectory, isFile: e.isFile })) };
  });

  fsMethod(table, 'fs/remove', byPath, async (p, conn) => {
    const f = files(conn);
    await f.remove(f.resolvePath(p.path), p.recursive === true, p.force === true, narrowing(conn, p.sandbox));
    return {};
  });
}

/** `fs/copy`, the chunked reads and writes of open handles, and the watches of missing paths. */
function handleMethods(table: MethodTable<Connection>) {
  fsMethod(
    table,
    'fs/copy',
    (p) => p.sourcePath,
    async (p, conn) => {
      const f = files(conn);
      await f.copy(
        f.resolvePath(p.sourcePath, 'sourcePath'),
        f.resolvePath(p.destinationPath, 'destinationPath'),
        p.recursive,
        narrowing(conn, p.sandbox),
      );
      return {};
    },
  );

  // ---- chunked reads (Codex's crate-internal fs/open, fs/readBlock, fs/close) ----
  fsMethod(table, 'fs/open', byPath, openHandle('openRead'));

  fsMethod(table, 'fs/readBlock', byHandle, async (p, conn) => {
    const block = await files(conn).readBlock(conn.owner, String(p.handleId), p.offset, p.len);
    return { chunk: block.chunk.toString('base64'), eof: block.eof };
  });

  fsMethod(table, 'fs/close', byHandle, async (p, conn) => {
    await files(conn).closeHandle(conn.owner, String(p.handleId));
    return {};
  });

  // ---- chunked writes (extension) ----
  fsMethod(table, 'fs/openWrite', byPath, openHandle('openWrite'));

  fsMethod(table, 'fs/writeBlock', byHandle, async (p, conn) => {
    const bytesWritten = await files(conn).writeBlock(conn.owner, String(p.handleId), decodeBase64(p.chunk, 'chunk'));
    return { bytesWritten };
  });

  fsMethod(table, 'fs/closeWrite', byHandle, async (p, conn) => ({
    bytesWritten: await files(conn).closeWrite(conn.owner, String(p.handleId)),
  }));

  // ---- watches ----
  fsMethod(table, 'fs/watchMissing', byWatch, async (p, conn) => {
    const f = files(conn);
    const present = p.present == null ? [] : Array.isArray(p.present) ? p.present : [p.present];
    await f.watchMissing(
      p.watchId,
      (p.missing ?? []).map((m) => f.resolvePath(m, 'missing')),
      present.map((m) => f.resolvePath(m, 'present')),
      conn,
    );
    return { watching: true };
  });

  fsMethod(table, 'fs/unwatch', byWatch, async (p, conn) => ({
    watching: false,
    removed: files(conn).unwatch(p.watchId, conn),
  }));
}
