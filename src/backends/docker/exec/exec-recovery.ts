/**
 * Server restart on the exec path (one engine exec per command): the commands a previous server
 * left running cannot be attached again (the engine attaches an exec's stdio once, at its start),
 * so they are found, killed and reported `lost`, never left running unseen. The engine keeps
 * every running exec of a container with its arguments (`ExecIDs` of the container's inspect,
 * `ProcessConfig` of each exec's): the wrapper's arguments name the command's pid file, and
 * carry the engine's recovery tag, which the wrapper itself never reads
 * (docs/docker-backend.md, "Lifecycle", Recovery).
 */
import type Docker from 'dockerode';
import type { BackendProcess, ProcessSink, RecoveredProcess, SandboxType } from '../../types.ts';
import { withDeadline } from '../engine/engine-client.ts';
import { runControl } from './exec-runner.ts';
import type { DockerLogger } from '../options.ts';
import { KILL_PID_FILES_SCRIPT, ROOT_PID_DIR, SIGNAL_SCRIPT, USER_PID_DIR, WAIT_PID_FILE_SCRIPT } from './scripts.ts';
import { execError } from '../../../errors.ts';

/** Why such a command ends `lost`. */
export const EXEC_RECOVERY_REASON = 'server restarted; the command ran as a docker exec and could not be re-attached';

/** One argument stays under the kernel's limit for a single argument (MAX_ARG_STRLEN, 128 KiB). */
const TAG_PIECE_CHARS = 96 * 1024;
/** A larger tag (a command line of some 200 KiB) is not carried: such a command is killed at a restart, unlisted. */
const MAX_TAG_PIECES = 3;

/** The wrapper's tag arguments (scripts.ts, WRAPPER_SCRIPT): a count, then base64 pieces. */
export function tagArguments(tag: string | undefined): string[] {
  if (tag === undefined || tag === '') return ['0'];
  const encoded = Buffer.from(tag, 'utf8').toString('base64');
  const pieces: string[] = [];
  for (let i = 0; i < encoded.length; i += TAG_PIECE_CHARS) pieces.push(encoded.slice(i, i + TAG_PIECE_CHARS));
  return pieces.length > MAX_TAG_PIECES ? ['0'] : [String(pieces.length), ...pieces];
}

/** A command of this server's wrapper, as the engine reports its exec. */
export interface RecordedCommand {
  readonly pidFile: string;
  readonly user: string;
  /** The engine's recovery tag; undefined for a command that carried none (or another version's wrapper). */
  readonly tag: string | undefined;
}

const PID_FILE = new RegExp(`^(?:${ROOT_PID_DIR}|${USER_PID_DIR})/[0-9a-f-]{36}$`);
/** Scripts that take a command's pid file as their first argument but are not the command. */
const CONTROL_SCRIPTS: ReadonlySet<string> = new Set([SIGNAL_SCRIPT, WAIT_PID_FILE_SCRIPT, KILL_PID_FILES_SCRIPT]);

/**
 * Reads a wrapper exec's arguments: `-c SCRIPT sh pidfile cwd stty arg0 uid N piece... argv`.
 * Any wrapper of this layout is recognised by its pid file (so a command of another server
 * version is still killed); the tag is read only where the layout has one.
 */
export function parseWrapperExec(config: {
  entrypoint?: string;
  arguments?: string[];
  user?: string;
}): RecordedCommand | undefined {
  const args = config.arguments ?? [];
  const [dashC, script, zero, pidFile] = args;
  if (config.entrypoint !== '/bin/sh' || dashC !== '-c' || zero !== 'sh' || script === undefined) return undefined;
  if (pidFile === undefined || !PID_FILE.test(pidFile) || CONTROL_SCRIPTS.has(script)) return undefined;
  const user = config.user === undefined || config.user === '' ? '0:0' : config.user;
  const count = Number(args[8]);
  let tag: string | undefined;
  if (script.includes('shift $((6 + $6))') && Number.isInteger(count) && count > 0 && count <= MAX_TAG_PIECES) {
    const pieces = args.slice(9, 9 + count);
    if (pieces.length === count) tag = Buffer.from(pieces.join(''), 'base64').toString('utf8');
  }
  return { pidFile, user, tag };
}

/** The running wrapper execs of a container, from the engine's exec records. */
export async function findRecordedCommands(
  docker: Docker,
  container: Docker.Container,
  timeoutMs: number,
): Promise<RecordedCommand[]> {
  const info = await withDeadline('container inspect', timeoutMs, (abortSignal) => container.inspect({ abortSignal }));
  const found: RecordedCommand[] = [];
  for (const id of (info as { ExecIDs?: string[] | null }).ExecIDs ?? []) {
    // An exec that ended or vanished between the two calls is no command to recover.
    const exec = await withDeadline('exec inspect', timeoutMs, (abortSignal) =>
      docker.getExec(id).inspect({ abortSignal }),
    ).catch(() => undefined);
    if (exec?.Running !== true) continue;
    const command = parseWrapperExec(
      exec.ProcessConfig as { entrypoint?: string; arguments?: string[]; user?: string },
    );
    if (command !== undefined) found.push(command);
  }
  return found;
}

/** A command that ended before this server started: nothing can reach it any more. */
function endedProcess(sandboxType: SandboxType): BackendProcess {
  const nothing = async (): Promise<void> => {};
  return {
    sandboxType,
    write: nothing,
    closeStdin: nothing,
    resize: nothing,
    signal: nothing,
    pauseOutput: () => {},
    resumeOutput: () => {},
  };
}

/**
 * Kills every command a previous server left running in `container` (as the command's own
 * user: see KILL_PID_FILES_SCRIPT) and hands each one with a tag to `adopt`, ended `lost`.
 * Resolves with the number handed over.
 */
export async function recoverExecCommands(
  o: { docker: Docker; container: Docker.Container; timeoutMs: number; log: DockerLogger },
  adopt: (p: RecoveredProcess, process: BackendProcess) => ProcessSink | undefined,
): Promise<number> {
  const commands = await findRecordedCommands(o.docker, o.container, o.timeoutMs);
  const byUser = new Map<string, string[]>();
  for (const c of commands) byUser.set(c.user, [...(byUser.get(c.user) ?? []), c.pidFile]);
  for (const [user, files] of byUser) {
    const result = await runControl(o.container, {
      cmd: ['/bin/sh', '-c', KILL_PID_FILES_SCRIPT, 'sh', ...files],
      user,
      timeoutMs: o.timeoutMs,
    });
    if (result.exitCode !== 0)
      throw execError('EXEC_ERR_BACKEND', `cannot kill the commands left running: ${result.stderr.trim()}`);
  }
  let adopted = 0;
  for (const c of commands) {
    if (c.tag === undefined) {
      o.log.warn({ pidFile: c.pidFile }, 'recover: killed a command left running that carried no recovery tag');
      continue;
    }
    const sandboxType: SandboxType =
      c.user === '0:0' || c.user === '0' || c.user === 'root' ? 'none' : 'container-user';
    const sink = adopt(
      { tag: c.tag, chunks: [], droppedBytes: 0, endOffset: 0, sandboxType, seqsUnknown: true },
      endedProcess(sandboxType),
    );
    if (sink === undefined) continue;
    sink.exit({ kind: 'lost', reason: EXEC_RECOVERY_REASON });
    adopted++;
  }
  return adopted;
}
