/**
 * The shell snippets run inside session containers (POSIX sh; busybox ash, dash and bash all
 * run them). Every command of a session image therefore needs `/bin/sh`.
 *
 * Process-group mechanism (why pid files): Docker has no "kill exec" API, and
 * `exec.inspect().Pid` is a PID of the engine's namespace, useless when the server runs in
 * another PID namespace (the Helm chart runs the engine as a sidecar). But every exec process
 * is made a session and process-group leader by runc (pid == pgid == sid), and `exec` keeps
 * the pid. So the wrapper writes `$$` to a pid file inside the container before exec'ing the
 * command, and a signal is a second exec that runs `kill -SIG -<pgid>` next to it.
 */
import { CONTROL_DIR } from '../container/container-config.ts';

/** Pid files of root execs: readable and writable by root only. */
export const ROOT_PID_DIR = `${CONTROL_DIR}/r`;
/**
 * The agent daemon's own socket: on the control tmpfs, in the root-only directory. Only
 * `exec-agent attach` and `start` inside the container use it; the server never opens it (its
 * direct way is the agent link, agent-link.ts, where the agent connects to the server).
 */
export const AGENT_SOCKET = `${ROOT_PID_DIR}/agent.sock`;
/** Pid files of sandbox-user execs: sticky, writable, not listable (mode 1733). */
export const USER_PID_DIR = `${CONTROL_DIR}/u`;
/** The session record (policy) for recovery: root-only, on the control tmpfs. */
export const RECORD_FILE = `${ROOT_PID_DIR}/session-record.json`;

/**
 * Session setup, run once as root after the container starts: control directories, the
 * workdir, and what `environment/info` reports (the shell). Args: workdir.
 */
export const SETUP_SCRIPT = [
  'set -e',
  `mkdir -p ${ROOT_PID_DIR} ${USER_PID_DIR} "$1"`,
  `chmod 700 ${ROOT_PID_DIR}`,
  `chmod 1733 ${USER_PID_DIR}`,
  'if command -v bash >/dev/null 2>&1; then command -v bash; else echo /bin/sh; fi',
].join('\n');

/**
 * Wraps every user command. Args: pidfile, cwd, stty settings ("rows R cols C" or ""),
 * arg0 ("" for none), uid of a non-root user ("" for root), the number N of recovery-tag pieces
 * that follow, the N pieces, then argv. The wrapper does not read the pieces: they are in the
 * exec's arguments for the engine to report to a restarted server (exec-recovery.ts). A non-root attempt whose
 * HOME it cannot read (the image's `/root`, inherited through `envPolicy`) gets its own home from
 * /etc/passwd (builtins only: no extra exec), else /tmp, so login shells do not start with an
 * error. The PTY size is set with `stty` before the command runs, so
 * it is right from the first instruction even on engines older than API 1.42 (no
 * `ConsoleSize` on exec create); the API resize after start keeps the engine's view in sync.
 */
export const WRAPPER_SCRIPT = [
  // The size first: once the pid file exists, a later resize through the API cannot be undone
  // by this stty (see DockerProcess's resize).
  '[ -z "$3" ] || stty $3 2>/dev/null',
  'echo $$ >"$1" || { echo "exec-server: cannot record the process id in $1" >&2; exit 126; }',
  'cd -- "$2" || exit 126',
  'a=$4',
  'if [ -n "$5" ] && [ ! -r "${HOME:-/nonexistent}" ]; then',
  '  while IFS=: read -r _n _p _u _g _c _h _s; do [ "$_u" = "$5" ] && HOME=$_h && break; done </etc/passwd',
  '  [ -r "${HOME:-/nonexistent}" ] || HOME=/tmp',
  '  export HOME',
  'fi',
  'shift $((6 + $6))',
  // busybox ash's `exec -a` does not search PATH: resolve the program first.
  'if [ -n "$a" ]; then c=$(command -v "$1") || c=$1; shift; exec -a "$a" "$c" "$@"; fi',
  'exec "$@"',
].join('\n');

/**
 * Shell function `kill_session SID`: SIGKILL to the process group SID and to every process whose
 * session is SID (children that made their own process group, e.g. shells with job control).
 * Shell builtins only (`read`, `set`, `kill`): it must work when the container cannot fork.
 */
const KILL_SESSION_FN = [
  'kill_session() {',
  '  kill -KILL -"$1" 2>/dev/null',
  '  for d in /proc/[0-9]*; do',
  '    read -r s 2>/dev/null <"$d/stat" || continue',
  // Fields after "pid (comm) ": state ppid pgrp session; comm may hold spaces and parentheses.
  '    t=${s##*) }',
  '    set -- "$1" $t',
  '    [ "$5" = "$1" ] && kill -KILL "${d#/proc/}" 2>/dev/null',
  '  done',
  '}',
].join('\n');

/**
 * Signals a process group. Args: pidfile, signal name without SIG. Runs as the user of the
 * target exec, so a sandboxed command that tampers with its pid file can at most redirect the
 * signal to processes it could signal itself. SIGKILL also sweeps every process of the
 * command's session (children that made their own process group, e.g. shells with job control).
 */
export const SIGNAL_SCRIPT = [
  KILL_SESSION_FN,
  // A signal sent right after the start can arrive before the wrapper has written its pid:
  // wait for it (bounded, 2 s) instead of dropping the signal.
  'i=0; while [ ! -s "$1" ] && [ "$i" -lt 200 ]; do sleep 0.01 2>/dev/null || sleep 1; i=$((i + 1)); done',
  'p=$(cat "$1" 2>/dev/null) || exit 0',
  'case $p in ""|*[!0-9]*) exit 0;; esac',
  'if [ "$2" = KILL ]; then kill_session "$p"; else kill -"$2" -"$p" 2>/dev/null; fi',
  'exit 0',
].join('\n');

/**
 * Kills the commands of pid files a previous server left running (server restart on the exec
 * path, exec-recovery.ts) and removes the files. Args: pidfiles. Runs as the commands' user,
 * for the reason given at SIGNAL_SCRIPT. A file still empty is waited for (bounded, 2 s): the
 * wrapper may not have written it yet.
 */
export const KILL_PID_FILES_SCRIPT = [
  KILL_SESSION_FN,
  'for f; do',
  '  i=0; while [ ! -s "$f" ] && [ "$i" -lt 200 ]; do sleep 0.01 2>/dev/null || sleep 1; i=$((i + 1)); done',
  '  read -r p 2>/dev/null <"$f" || p=',
  '  case $p in ""|*[!0-9]*) ;; *) kill_session "$p";; esac',
  'done',
  'rm -f -- "$@"',
  'exit 0',
].join('\n');

/**
 * Kills every process of the container but its init and keep-alive loop (session 1: PID 1,
 * docker-init, and its child, KEEPALIVE_CMD; no other process can join that session), the exec
 * agent (any process whose program is $1) and this script. In passes until one finds nothing
 * left (a fork bomb forks between two), at most 100; exit 1 if it never ends. Builtins only: under
 * a fork bomb the container may have no process slot for a child. Prints the number of passes.
 */
export const KILL_ALL_SCRIPT = [
  'me=$$; agent=$1; n=0',
  'while [ "$n" -lt 100 ]; do',
  '  found=0',
  '  for d in /proc/[0-9]*; do',
  '    p=${d#/proc/}',
  '    [ "$p" = "$me" ] && continue',
  '    read -r s 2>/dev/null <"$d/stat" || continue',
  '    t=${s##*) }',
  '    set -- $t',
  '    [ "$1" = Z ] || [ "$4" = 1 ] || [ "$4" = "$me" ] && continue',
  '    [ -n "$agent" ] && [ "$d/exe" -ef "$agent" ] && continue',
  '    kill -KILL "$p" 2>/dev/null && found=1',
  '  done',
  '  [ "$found" = 0 ] && { echo "$n"; exit 0; }',
  '  n=$((n + 1))',
  'done',
  'exit 1',
].join('\n');

/**
 * Prepares the container-user sandbox, as root. Args: uid:gid, then four lists each ended by
 * `--`: writable roots; revoked roots (writable under the previous layout, not now);
 * world-writable dirs to close ("lock"); world-writable dirs to open ("unlock"); then the
 * deny-read paths. Writable roots get owned by the sandbox user (only what is not already:
 * cheap when run again), revoked ones go back to root; shared tmp dirs stay root-owned with
 * the sticky bit, mode 1777 or 1775; deny-read paths become root-owned and closed to group
 * and others (root keeps access through ownership, without needing DAC_READ_SEARCH).
 */
export const PREPARE_SANDBOX_SCRIPT = [
  'u=$1; shift',
  'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do',
  '  mkdir -p -- "$1" && find "$1" -xdev ! -user "${u%%:*}" -exec chown -h "$u" {} + || exit 1',
  '  shift',
  'done; shift',
  'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do',
  '  [ -e "$1" ] && { find "$1" -xdev ! -user 0 -exec chown -h 0:0 {} + || exit 1; }',
  '  shift',
  'done; shift',
  'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do [ -d "$1" ] && { chown 0:0 "$1"; chmod 1775 "$1"; }; shift; done; shift',
  'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do [ -d "$1" ] && { chown 0:0 "$1"; chmod 1777 "$1"; }; shift; done; shift',
  'for p; do',
  '  if [ -e "$p" ] || [ -L "$p" ]; then chown -h 0:0 "$p" && chmod go-rwx "$p" || exit 1; fi',
  'done',
  'exit 0',
].join('\n');

/** Waits (bounded, 2 s) until a command's wrapper wrote its pid file. Args: pidfile. */
export const WAIT_PID_FILE_SCRIPT =
  'i=0; while [ ! -e "$1" ] && [ "$i" -lt 200 ]; do sleep 0.01 2>/dev/null || sleep 1; i=$((i + 1)); done';

/** Removes finished pid files. Args: paths. */
export const CLEANUP_SCRIPT = 'rm -f -- "$@"';

/** World-writable directories the sandbox opens or closes depending on the writable roots. */
export const SHARED_TMP_DIRS = ['/tmp', '/var/tmp', '/dev/shm'] as const;
