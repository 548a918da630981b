/**
 * The kernel's bound on one argument or environment string (`MAX_ARG_STRLEN`: 32 pages, the
 * terminating NUL included), checked before a start reaches any backend: past it `execve` fails
 * with E2BIG wherever the command runs, and a backend would report it less clearly (the local
 * backend's helper fails before the command exists). The bound on all of them together depends
 * on the stack limit where the command runs, so that one stays the backend's E2BIG.
 */
import { spawnFailure } from '../backends/spawn-failure.ts';

/** Bytes of one argument or `NAME=value` string, its NUL included, that `execve` accepts. */
export const MAX_ARG_BYTES = 32 * 4096;

/** Throws `EXEC_ERR_SPAWN_FAILED` (E2BIG) when one string of `argv` or `env` is past `MAX_ARG_BYTES`. */
export function checkArgLengths(argv: readonly string[], env: Readonly<Record<string, string>>): void {
  const program = argv[0] ?? '';
  argv.forEach((arg, i) => {
    const bytes = Buffer.byteLength(arg) + 1;
    if (bytes > MAX_ARG_BYTES) throw tooLong(program, `argv[${i}] is ${bytes} bytes`);
  });
  for (const [name, value] of Object.entries(env)) {
    const bytes = Buffer.byteLength(name) + Buffer.byteLength(value) + 2;
    if (bytes > MAX_ARG_BYTES) throw tooLong(program, `environment variable ${name} is ${bytes} bytes`);
  }
}

function tooLong(program: string, what: string) {
  return spawnFailure(
    program,
    'E2BIG',
    `Argument list too long (${what}; one argument or environment string may have ${MAX_ARG_BYTES - 1} bytes: pass larger data through stdin or a file)`,
  );
}
