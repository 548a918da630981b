/** Errors both backends' `SessionFs` give for the same case, so that they answer alike. */
import { execError, type ExecServerError } from '../errors.ts';

/**
 * The most entries `fs/readDirectory` answers. Past it a listing would hold the whole directory
 * in the server's memory, then in one answer (about 60 bytes an entry): such a directory is
 * listed by a command instead (`ls`, `find`), which streams.
 */
export const MAX_LISTING_ENTRIES = 100_000;

/** A directory with more than MAX_LISTING_ENTRIES entries. */
export function tooManyEntries(path: string): ExecServerError {
  return execError(
    'EXEC_ERR_TOO_LARGE',
    `${path} has more than ${MAX_LISTING_ENTRIES} entries, more than fs/readDirectory answers; list it with a command (ls, find)`,
    { detail: { path, maxEntries: MAX_LISTING_ENTRIES } },
  );
}

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
