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

/**
 * `wait({ timeoutMs })` ran out of time. The process was left running: `wait()` again, `kill()`,
 * or `disconnect()` the handle (docs/sdk.md, "Wait with a timeout, detach").
 */
export class WaitTimeoutError extends Error {
  override readonly name = 'WaitTimeoutError';
  readonly processId: string;
  readonly timeoutMs: number;

  constructor(processId: string, timeoutMs: number) {
    super(`process ${processId} did not end within ${timeoutMs} ms (it is still running)`);
    this.processId = processId;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * `wait()` on a handle that `disconnect()` detached from its process: no output or exit reaches
 * it any more, while the process runs on; `client.attach(processId)` listens to it again.
 */
export class HandleDisconnectedError extends Error {
  override readonly name = 'HandleDisconnectedError';
  readonly processId: string;

  constructor(processId: string) {
    super(`handle of process ${processId} was disconnected (the process runs on; attach to it again)`);
    this.processId = processId;
  }
}

/**
 * `sendStdin` found the process's stdin closed: after `closeStdin`, after the process ended, or
 * on a process started without `stdin: 'pipe'`. The input was not written.
 */
export class StdinClosedError extends Error {
  override readonly name = 'StdinClosedError';
  readonly processId: string;

  constructor(processId: string) {
    super(`stdin of process ${processId} is closed: the input was not written`);
    this.processId = processId;
  }
}

/** An answer's body as JSON; undefined when it is empty or not JSON (a proxy's page, say). */
export function jsonOrUndefined(text: string): unknown {
  try {
    return text === '' ? undefined : JSON.parse(text);
  } catch {
    return undefined;
  }
}
