/** Errors the SDK throws. */
import type { ExecResult } from './exec-result.ts';

/**
 * An HTTP error answer: the status and the server's stable `EXEC_ERR_*` code (`HTTP_<status>`
 * when the answer carried none, e.g. from a proxy in between).
 */
export class ExecServerHttpError extends Error {
  override readonly name = 'ExecServerHttpError';
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }

  /** The error of an answer with `status` and the (parsed, if JSON) `body`. */
  static of(status: number, body: unknown, fallbackMessage: string): ExecServerHttpError {
    const b = (typeof body === 'object' && body !== null ? body : {}) as { code?: unknown; message?: unknown };
    return new ExecServerHttpError(
      status,
      typeof b.code === 'string' ? b.code : `HTTP_${status}`,
      typeof b.message === 'string' ? b.message : fallbackMessage,
    );
  }
}

/** `wait()` on a command that did not exit with 0 (unless `check: false`). */
export class CommandExitError extends Error {
  override readonly name = 'CommandExitError';
  readonly result: ExecResult;

  constructor(result: ExecResult) {
    const how =
      result.terminal === 'exited'
        ? `exit code ${result.exitCode}`
        : `${result.terminal}${result.signal ? ` (${result.signal})` : ''}, code ${result.exitCode}`;
    super(
      `command ${JSON.stringify(result.argv.join(' '))} failed: ${how}${result.sandboxDenied ? ' (sandbox denied)' : ''}`,
    );
    this.result = result;
  }

  get exitCode(): number {
    return this.result.exitCode;
  }
}

/**
 * The WebSocket connection failed the SDK: it closed (or was never open) while a request waited
 * for its answer, it is gone for good while a handle's `wait()` waits (docs/sdk.md, "Sessions"),
 * or a connect got no upgrade or no `initialize` answer within `connectTimeoutMs`.
 */
export class ExecServerConnectionError extends Error {
  override readonly name = 'ExecServerConnectionError';
}

/** An answer's body as JSON; undefined when it is empty or not JSON (a proxy's page, say). */
export function jsonOrUndefined(text: string): unknown {
  try {
    return text === '' ? undefined : JSON.parse(text);
  } catch {
    return undefined;
  }
}
