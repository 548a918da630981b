/** Errors both backends' `SessionFs` give for the same case, so that they answer alike. */
import { execError, type ExecServerError } from '../errors.ts';

/**
 * A FIFO, socket or device where a file is read, written or copied: the request's mistake.
 * Refused before any byte moves: opening a FIFO blocks until a peer appears, and a device such
 * as /dev/zero or /dev/kmsg never ends or waits forever for more.
 */
export function notRegularFile(path: string): ExecServerError {
  return execError(
    'EXEC_ERR_INVALID_REQUEST',
    `${path}: not a regular file (a FIFO, socket or device); only regular files are read, written or copied`,
    { detail: { path } },
  );
}
