/**
 * The one error registry. Every error the server reports carries a stable `code`
 * (`EXEC_ERR_*`), the HTTP status it maps to, and the JSON-RPC error code it maps to;
 * the same `code` travels in JSON-RPC `error.data.code` and in HTTP `{code, message}` bodies.
 */

/** JSON-RPC 2.0 standard codes, plus -32004 which Codex uses for "not found". */
export const RpcCode = {
  parseError: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603,
  notFound: -32004,
} as const;

/** Registry: code -> [HTTP status, JSON-RPC code]. Codes are part of the public API; never rename. */
export const ERROR_REGISTRY = {
  EXEC_ERR_PARSE: [400, RpcCode.parseError],
  EXEC_ERR_INVALID_REQUEST: [400, RpcCode.invalidRequest],
  EXEC_ERR_METHOD_NOT_FOUND: [404, RpcCode.methodNotFound],
  EXEC_ERR_INVALID_PARAMS: [400, RpcCode.invalidParams],
  EXEC_ERR_NOT_INITIALIZED: [400, RpcCode.invalidRequest],
  EXEC_ERR_ALREADY_INITIALIZED: [400, RpcCode.invalidRequest],
  EXEC_ERR_UNAUTHORIZED: [401, RpcCode.invalidRequest],
  EXEC_ERR_ORIGIN_FORBIDDEN: [403, RpcCode.invalidRequest],
  EXEC_ERR_SESSION_NOT_FOUND: [404, RpcCode.invalidRequest],
  EXEC_ERR_SESSION_DEAD: [410, RpcCode.invalidRequest],
  EXEC_ERR_SESSION_LIMIT: [429, RpcCode.invalidRequest],
  EXEC_ERR_PROCESS_NOT_FOUND: [404, RpcCode.invalidRequest],
  EXEC_ERR_PROCESS_EXISTS: [409, RpcCode.invalidRequest],
  EXEC_ERR_PROCESS_STARTING: [409, RpcCode.invalidRequest],
  EXEC_ERR_PROCESS_LIMIT: [429, RpcCode.invalidRequest],
  EXEC_ERR_REJECTED: [403, RpcCode.invalidRequest],
  EXEC_ERR_APPROVAL_NOT_FOUND: [404, RpcCode.invalidRequest],
  EXEC_ERR_SNAPSHOT_IN_USE: [409, RpcCode.invalidRequest],
  /** The tenant has as many snapshots as it may (`--max-snapshots-per-tenant`); they stay until deleted. */
  EXEC_ERR_SNAPSHOT_LIMIT: [429, RpcCode.invalidRequest],
  EXEC_ERR_NOT_FOUND: [404, RpcCode.notFound],
  EXEC_ERR_FS_DENIED: [403, RpcCode.invalidRequest],
  EXEC_ERR_SANDBOX_TYPE_FORBIDDEN: [403, RpcCode.invalidRequest],
  /** A confined tenant named a host directory outside `--local-host-dirs` (local backend). */
  EXEC_ERR_HOST_DIR_FORBIDDEN: [403, RpcCode.invalidRequest],
  EXEC_ERR_FS: [500, RpcCode.internal],
  EXEC_ERR_TOO_LARGE: [413, RpcCode.invalidRequest],
  EXEC_ERR_TOOL_PAYLOAD: [400, RpcCode.invalidParams],
  EXEC_ERR_UNSUPPORTED: [501, RpcCode.methodNotFound],
  EXEC_ERR_BACKEND_UNAVAILABLE: [503, RpcCode.internal],
  EXEC_ERR_BACKEND: [502, RpcCode.internal],
  EXEC_ERR_SHUTTING_DOWN: [503, RpcCode.internal],
  EXEC_ERR_BUSY: [429, RpcCode.invalidRequest],
  EXEC_ERR_DISK_LIMIT: [507, RpcCode.invalidRequest],
  EXEC_ERR_CONFIG: [500, RpcCode.internal],
  EXEC_ERR_INSTANCE_IN_USE: [409, RpcCode.internal],
  /** A session token used for another session, for listing or creating sessions, or outside the session's routes. */
  EXEC_ERR_TOKEN_SCOPE: [403, RpcCode.invalidRequest],
  /** A `read` session token asked for something that changes the session. */
  EXEC_ERR_TOKEN_READ_ONLY: [403, RpcCode.invalidRequest],
  /** A session token past its `expiresAt`. */
  EXEC_ERR_TOKEN_EXPIRED: [401, RpcCode.invalidRequest],
  /** A session token that was revoked (or whose session was deleted). */
  EXEC_ERR_TOKEN_REVOKED: [401, RpcCode.invalidRequest],
  /** The session keeps as many unexpired token revocations as it may (`MAX_TOKEN_REVOCATIONS`). */
  EXEC_ERR_TOKEN_LIMIT: [429, RpcCode.invalidRequest],
  /** A start that cannot happen: cwd missing or not a directory, program missing or not executable. */
  EXEC_ERR_SPAWN_FAILED: [422, RpcCode.internal],
  EXEC_ERR_INTERNAL: [500, RpcCode.internal],
} as const satisfies Record<string, readonly [number, number]>;

/**
 * Codes a client may retry unchanged after a pause: the server or its engine is busy, starting,
 * stopping or briefly unreachable. Every other code needs a different request (docs/errors.md).
 */
export const RETRYABLE_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'EXEC_ERR_SESSION_LIMIT',
  'EXEC_ERR_PROCESS_STARTING',
  'EXEC_ERR_PROCESS_LIMIT',
  'EXEC_ERR_BACKEND_UNAVAILABLE',
  'EXEC_ERR_SHUTTING_DOWN',
  'EXEC_ERR_BUSY',
]);

/** A stable error code. */
export type ErrorCode = keyof typeof ERROR_REGISTRY;

/** Every HTTP status an error of the registry answers with. */
export type ErrorStatus = (typeof ERROR_REGISTRY)[ErrorCode][0];

/** The distinct HTTP statuses of the registry, ascending (for OpenAPI error responses). */
export const ERROR_STATUSES: readonly ErrorStatus[] = [
  ...new Set(Object.values(ERROR_REGISTRY).map(([status]) => status)),
].sort((a, b) => a - b);

/**
 * The base (and only) error class the server throws on purpose. `code` narrows in a
 * `switch`; `cause` keeps the underlying error (a docker-modem error, an errno) for logs.
 */
export class ExecServerError<C extends ErrorCode = ErrorCode> extends Error {
  override readonly name: string = 'ExecServerError';
  readonly code: C;
  readonly statusCode: ErrorStatus;
  readonly rpcCode: number;
  /** Extra machine-readable detail (e.g. the offending field), sent in `error.data`. */
  readonly detail: Record<string, unknown> | undefined;

  constructor(code: C, message: string, options?: { cause?: unknown; detail?: Record<string, unknown> }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    const [status, rpc] = ERROR_REGISTRY[code];
    this.statusCode = status;
    this.rpcCode = rpc;
    this.detail = options?.detail;
  }
}

/** Shorthand constructor; reads better at throw sites than `new ExecServerError(...)`. */
export function execError<C extends ErrorCode>(
  code: C,
  message: string,
  options?: { cause?: unknown; detail?: Record<string, unknown> },
): ExecServerError<C> {
  return new ExecServerError(code, message, options);
}

/** The HTTP body of an error: `{code, message}` (the protocol's ErrorSchema). */
export function httpErrorBody(
  err: ExecServerError,
  extra: { call_id?: string } = {},
): { code: ErrorCode; message: string; call_id?: string } {
  return { code: err.code, message: err.message, ...extra };
}

/** The JSON-RPC `error` member of an answer: our code in `data.code`, with the detail beside it. */
export function rpcErrorBody(err: ExecServerError): { code: number; message: string; data: Record<string, unknown> } {
  return { code: err.rpcCode, message: err.message, data: { code: err.code, ...(err.detail ?? {}) } };
}

/**
 * The registry's code for a 4xx the HTTP framework answers on its own (body too large, bad
 * JSON, wrong content type...); the status itself stays the framework's.
 */
export function codeOfHttpStatus(status: number): ErrorCode {
  switch (status) {
    case 401:
      return 'EXEC_ERR_UNAUTHORIZED';
    case 404:
      return 'EXEC_ERR_NOT_FOUND';
    case 413:
      return 'EXEC_ERR_TOO_LARGE';
    case 429:
      return 'EXEC_ERR_BUSY';
    default:
      return 'EXEC_ERR_INVALID_REQUEST';
  }
}

/** Wraps anything thrown into an ExecServerError, keeping ours as they are. */
export function toExecError(err: unknown): ExecServerError {
  if (err instanceof ExecServerError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new ExecServerError('EXEC_ERR_INTERNAL', message, { cause: err });
}

/** Maps a Node fs errno error to the registry (ENOENT -> not found, EACCES -> denied...). */
export function fromErrno(err: unknown, what: string): ExecServerError {
  if (err instanceof ExecServerError) return err;
  // Structural, not NodeJS.ErrnoException: this module is also compiled for the browser (web/).
  const code = (err as { code?: unknown } | undefined)?.code;
  const msg = err instanceof Error ? err.message : String(err);
  switch (code) {
    case 'ENOENT':
      return execError('EXEC_ERR_NOT_FOUND', `${what}: No such file or directory`, { cause: err });
    case 'EACCES':
    case 'EPERM':
      return execError('EXEC_ERR_FS_DENIED', `${what}: Permission denied`, { cause: err });
    case 'EROFS':
      return execError('EXEC_ERR_FS_DENIED', `${what}: Read-only file system`, { cause: err });
    // The client's mistakes, not the server's (docs/filesystem.md): listing or writing through a
    // file, making what exists, reading or writing a directory as a file, a path through a
    // symlink loop, a name longer than the filesystem takes.
    case 'ENOTDIR':
      return execError('EXEC_ERR_INVALID_REQUEST', `${what}: Not a directory`, { cause: err, detail: { errno: code } });
    case 'EEXIST':
      return execError('EXEC_ERR_INVALID_REQUEST', `${what}: File exists`, { cause: err, detail: { errno: code } });
    case 'EISDIR':
      return execError('EXEC_ERR_INVALID_REQUEST', `${what}: Is a directory`, { cause: err, detail: { errno: code } });
    case 'ELOOP':
      return execError('EXEC_ERR_INVALID_REQUEST', `${what}: Too many levels of symbolic links`, {
        cause: err,
        detail: { errno: code },
      });
    case 'ENAMETOOLONG':
      return execError('EXEC_ERR_INVALID_PARAMS', `${what}: File name too long`, {
        cause: err,
        detail: { errno: code },
      });
    default:
      // node:fs cp refusing a source and destination that cannot go together (the same file,
      // a directory onto a file or into itself): the request, not the filesystem, is wrong.
      if (typeof code === 'string' && code.startsWith('ERR_FS_CP_'))
        return execError('EXEC_ERR_INVALID_REQUEST', `${what}: ${msg}`, { cause: err });
      return execError('EXEC_ERR_FS', `${what}: ${msg}`, { cause: err });
  }
}
