/**
 * The gate of a hibernatable session's filesystem: every call waits while a checkpoint or a
 * restore runs, and wakes a hibernated container first (hibernation.ts).
 */
import { execError } from '../../../errors.ts';
import type { BackendProcess, SessionFs } from '../../types.ts';

/** Runs `fn` with the container awake; `hold` keeps the call counted past its return. */
export type Gate = <T>(fn: () => Promise<T>, hold?: (value: T) => Promise<void>) => Promise<T>;

/** The session's filesystem with every call behind the gate. */
export function gatedFs(fs: SessionFs, use: Gate): SessionFs {
  return {
    realpath: (p) => use(() => fs.realpath(p)),
    stat: (p) => use(() => fs.stat(p)),
    readFile: (p, max) => use(() => fs.readFile(p, max)),
    // The read's exec stays open until the stream ends: the gate counts it until then.
    openRead: (p, offset) => use(() => fs.openRead(p, offset), streamEnded),
    writeFile: (p, data) => use(() => fs.writeFile(p, data)),
    writeStream: (p, source) => use(() => fs.writeStream(p, source)),
    createDirectory: (p, r) => use(() => fs.createDirectory(p, r)),
    readDirectory: (p) => use(() => fs.readDirectory(p)),
    remove: (p, r, f) => use(() => fs.remove(p, r, f)),
    copy: (s, d, r) => use(() => fs.copy(s, d, r)),
  };
}

/** Resolves when a stream handed to a caller is over, however it ends. */
function streamEnded(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise<void>((resolve) => {
    const s = stream as NodeJS.ReadableStream & { readableEnded?: boolean; destroyed?: boolean };
    if (s.readableEnded === true || s.destroyed === true) return resolve();
    s.once('end', () => resolve());
    s.once('close', () => resolve());
    s.once('error', () => resolve());
  });
}

/** Calls inside the container right now; a checkpoint waits until there are none. */
export class InFlight {
  #count = 0;
  #drained: (() => void) | undefined;

  /** Counts one call in; returns its release. */
  enter(): () => void {
    this.#count++;
    return () => {
      this.#count--;
      if (this.#count === 0) this.#drained?.();
    };
  }

  /** Resolves once no call is in, or fails after `timeoutMs` (EXEC_ERR_BUSY). */
  async drained(timeoutMs: number): Promise<void> {
    if (this.#count === 0) return;
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.#drained = resolve;
        timer = setTimeout(
          () =>
            reject(
              execError(
                'EXEC_ERR_BUSY',
                `cannot checkpoint: ${this.#count} call(s) into the container did not finish within ${timeoutMs} ms`,
              ),
            ),
          timeoutMs,
        );
      });
    } finally {
      clearTimeout(timer);
      this.#drained = undefined;
    }
  }
}

/**
 * A process behind the gate. Input, resizes and signals need the container (and the agent's
 * connection): they wake it. Everything else goes straight through (acknowledgements are kept
 * by the process itself).
 */
export function gatedProcess(proc: BackendProcess, use: Gate): BackendProcess {
  const acknowledge = proc.acknowledge?.bind(proc);
  const dispose = proc.dispose?.bind(proc);
  const stdinRoom = proc.stdinRoom?.bind(proc);
  return {
    get sandboxType() {
      return proc.sandboxType;
    },
    write: (data) => use(() => proc.write(data)),
    closeStdin: () => use(() => proc.closeStdin()),
    resize: (size) => use(() => proc.resize(size)),
    signal: (signal) => use(() => proc.signal(signal)),
    pauseOutput: () => proc.pauseOutput(),
    resumeOutput: () => proc.resumeOutput(),
    ...(acknowledge !== undefined ? { acknowledge } : {}),
    ...(dispose !== undefined ? { dispose } : {}),
    // Waiting for room wakes nothing: the write after it does.
    ...(stdinRoom !== undefined ? { stdinRoom } : {}),
  };
}

/** Why a session on the exec path cannot be checkpointed while commands run. */
export function attachedExecsError(what: string, running: number, execPathReason: string | undefined): Error {
  return execError(
    'EXEC_ERR_BUSY',
    `cannot ${what}: ${running} process(es) still running through attached engine execs (this session has no exec agent: ${execPathReason ?? 'exec path'}), which a gVisor checkpoint cannot carry (its restore fails); let them end or terminate them first`,
  );
}
