/**
 * One answer, on every backend, for a start that cannot happen: the working directory is missing
 * or not a directory, the program is missing or not executable. The request fails with
 * `EXEC_ERR_SPAWN_FAILED` (JSON-RPC -32603, as the reference Codex exec-server answers such a
 * start; HTTP 422) and a message in the reference's words; no process is created, so nothing is
 * reported as an exit (docs/protocol.md, "Starts that cannot happen").
 */
import { constants as osConstants } from 'node:os';
import { execError, type ExecServerError } from '../errors.ts';

/**
 * The error for `what` (the program, or `cwd PATH`) that could not be started: `errno` as a
 * number or a name (`ENOENT`), `text` its description (`No such file or directory`).
 */
export function spawnFailure(what: string, errno: number | string | undefined, text: string): ExecServerError {
  const name =
    typeof errno === 'string'
      ? errno
      : (Object.entries(osConstants.errno).find(([, n]) => n === errno)?.[0] ?? String(errno ?? ''));
  return execError('EXEC_ERR_SPAWN_FAILED', `${what}: ${text}`, { detail: { errno: name } });
}
