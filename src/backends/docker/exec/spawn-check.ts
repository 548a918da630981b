/**
 * The exec path's check of a start before it runs (docs/protocol.md, "Starts that cannot
 * happen"). The exec agent learns from its own child whether the directory could be entered and
 * the program run, and answers the spawn with a failure; one engine exec per command cannot: the
 * wrapper's `cd` or `exec` fails after the start was answered, as exit 126 or 127. So that both
 * paths give one answer, the exec path asks first, as the command's user, with a short control
 * command: can it enter the cwd, and is the program there to run (searched in the command's
 * PATH as execvp does)? A start that passes runs as before; anything the check cannot see (the
 * program's interpreter missing, a race) still ends as the wrapper's exit code.
 */
import type { SpawnRequest } from '../../types.ts';
import { spawnFailure } from '../../spawn-failure.ts';
import type { ControlRunner } from './control-runner.ts';

/** Args: cwd, program, PATH. Prints `ERRNO text` and exits 3 (cwd) or 4 (program), else 0. */
const SPAWN_CHECK_SCRIPT = [
  'set -f',
  'cd -- "$1" 2>/dev/null || {',
  '  if [ -d "$1" ]; then echo "EACCES Permission denied"',
  '  elif [ -e "$1" ]; then echo "ENOTDIR Not a directory"',
  '  else echo "ENOENT No such file or directory"; fi',
  '  exit 3',
  '}',
  'case $2 in',
  '*/*) p=$2 ;;',
  '*) p=; IFS=:',
  '  for d in $3; do [ -f "${d:-.}/$2" ] && p=${d:-.}/$2 && [ -x "$p" ] && break; done',
  '  unset IFS ;;',
  'esac',
  '[ -n "$p" ] && [ -e "$p" ] || { echo "ENOENT No such file or directory"; exit 4; }',
  '[ -f "$p" ] && [ -x "$p" ] || { echo "EACCES Permission denied"; exit 4; }',
].join('\n');

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Throws EXEC_ERR_SPAWN_FAILED where the start cannot happen; resolves where it can (or the check could not tell). */
export async function checkSpawn(
  runner: ControlRunner,
  request: SpawnRequest,
  user: string,
  env: Readonly<Record<string, string>>,
  timeoutMs: number,
): Promise<void> {
  const program = request.argv[0] ?? '';
  const result = await runner
    .run({
      cmd: ['/bin/sh', '-c', SPAWN_CHECK_SCRIPT, 'sh', request.cwd, program, env['PATH'] ?? DEFAULT_PATH],
      user,
      timeoutMs,
    })
    .catch(() => undefined);
  if (result === undefined || (result.exitCode !== 3 && result.exitCode !== 4)) return;
  const line = result.stdout.toString('utf8').trim();
  const at = line.indexOf(' ');
  const what = result.exitCode === 3 ? `cwd ${request.cwd}` : program;
  throw spawnFailure(what, line.slice(0, at), line.slice(at + 1));
}
