/**
 * `exec-server shell [--image I]` / `exec-server shell --attach SESSION`: an interactive
 * login shell in a session's PTY, from the user's terminal in raw mode. The window size
 * follows the terminal (SIGWINCH). Ctrl-] then d detaches (the shell keeps running);
 * Ctrl-] twice sends a literal Ctrl-]. When the shell exits the session is deleted.
 */
import { randomUUID } from 'node:crypto';
import type { ParseArgsConfig } from 'node:util';
import { DRAIN_CLOSE_CODE, ExecServerClient } from '../client/client.ts';
import type { ExecHandle } from '../client/process-handle.ts';
import {
  CLI_CLIENT_NAME,
  clientCommand,
  connectionOf,
  connectNewSession,
  sessionCreationOptions,
  shellExitCode,
  UsageError,
} from './common.ts';
import { execError } from '../errors.ts';

const ESCAPE = 0x1d; // Ctrl-]

/** `exec-server shell --help`. */
export const SHELL_HELP = `Usage: exec-server shell [--image I] [--allow-network ENTRY]... [--url U] [--token T]
       exec-server shell --attach SESSION

An interactive shell in a new session (or re-attached to the shell of SESSION).
Detach with Ctrl-] then d; the shell keeps running. The session is deleted when the shell exits.`;

/** Splits keyboard input into bytes to send and a detach request. */
export class DetachDetector {
  #pending = false;

  feed(data: Buffer): { send: Buffer; detach: boolean } {
    const out: number[] = [];
    for (let i = 0; i < data.length; i++) {
      const b = data[i]!;
      if (this.#pending) {
        this.#pending = false;
        if (b === 0x64 /* d */ || b === 0x04 /* Ctrl-D */) return { send: Buffer.from(out), detach: true };
        if (b === ESCAPE) out.push(ESCAPE);
        else out.push(ESCAPE, b);
        continue;
      }
      if (b === ESCAPE) this.#pending = true;
      else out.push(b);
    }
    return { send: Buffer.from(out), detach: false };
  }
}

const SHELL_OPTIONS = {
  ...sessionCreationOptions,
  attach: { type: 'string' },
} as const satisfies ParseArgsConfig['options'];

/** `exec-server shell`: an interactive shell in a new session, or attached again to one. */
export function shellCommand(args: string[]): Promise<number> {
  return clientCommand(args, SHELL_OPTIONS, SHELL_HELP, async ({ values, positionals }) => {
    if (positionals.length > 0) throw new UsageError(`shell takes no arguments (got ${positionals.join(' ')})`);
    if (!process.stdin.isTTY || !process.stdout.isTTY)
      throw new UsageError('shell needs a terminal on stdin and stdout; use `exec-server run` for scripts');
    const { url, token } = connectionOf(values);
    const cols = process.stdout.columns;
    const rows = process.stdout.rows;
    let client: ExecServerClient;
    let handle: ExecHandle;
    if (values.attach !== undefined) {
      client = await ExecServerClient.connect(url, {
        token,
        clientName: CLI_CLIENT_NAME,
        resumeSessionId: values.attach,
      });
      const shells = (await client.listProcesses())
        .filter((p) => p.mode === 'pty' && p.status === 'running')
        .sort((a, b) => Number(a.processId.startsWith('shell-')) - Number(b.processId.startsWith('shell-')));
      const target = shells[shells.length - 1];
      if (!target) {
        await client.disconnect();
        throw execError('EXEC_ERR_PROCESS_NOT_FOUND', `session ${values.attach} has no running shell to attach to`);
      }
      handle = await client.attach(target.processId, { collect: false });
      await handle.resize(cols, rows).catch(() => undefined);
      process.stderr.write(`[exec-server] attached to session ${client.sessionId}; detach with Ctrl-] d\r\n`);
    } else {
      client = await connectNewSession(values);
      const env = client.initResult['environmentInfo'] as { shell?: { path?: string } } | undefined;
      const shell = env?.shell?.path ?? '/bin/bash';
      process.stderr.write(`[exec-server] shell in session ${client.sessionId}; detach with Ctrl-] d\r\n`);
      handle = await client.exec([shell, '-l'], {
        tty: true,
        size: { cols, rows },
        env: { TERM: process.env['TERM'] ?? 'xterm-256color' },
        collect: false,
        check: false,
        processId: `shell-${randomUUID()}`,
      });
    }
    return await interact(client, handle);
  });
}

function interact(client: ExecServerClient, handle: ExecHandle): Promise<number> {
  const stdin = process.stdin;
  const stdout = process.stdout;
  const detector = new DetachDetector();
  return new Promise((resolve) => {
    let finished = false;
    let exiting = false;
    const restore = (): void => {
      stdin.off('data', onData);
      stdout.off('resize', onResize);
      if (stdin.isTTY) stdin.setRawMode(false);
      stdin.pause();
    };
    const finish = (code: number): void => {
      if (finished) return;
      finished = true;
      restore();
      resolve(code);
    };
    const onData = (data: Buffer): void => {
      const { send, detach } = detector.feed(data);
      if (send.length > 0) void handle.sendStdin(send).catch(() => undefined);
      if (detach) {
        stdout.write(`\r\n[exec-server] detached; re-attach with: exec-server shell --attach ${client.sessionId}\r\n`);
        void client.disconnect().finally(() => finish(0));
      }
    };
    const onResize = (): void => void handle.resize(stdout.columns, stdout.rows).catch(() => undefined);
    handle.onOutput((c) => {
      if (c.data.length > 0) stdout.write(c.data);
    });
    handle.onExit((result) => {
      exiting = true;
      void client
        .deleteSession()
        .catch(() => undefined)
        .finally(() => finish(shellExitCode(result.exitCode)));
    });
    client.onDisconnect(({ code, reason }) => {
      if (finished || exiting || code === 1000 || code === 1005) return;
      // A rollout: the SDK resumes the session through the same address by itself.
      if (code === DRAIN_CLOSE_CODE) return void stdout.write('\r\n[exec-server] server restarting; resuming\r\n');
      stdout.write(
        `\r\n[exec-server] connection lost (${code}${reason ? ` ${reason}` : ''}); re-attach with: exec-server shell --attach ${client.sessionId}\r\n`,
      );
      finish(125);
    });
    stdin.setRawMode(true);
    stdin.on('data', onData);
    stdin.resume();
    stdout.on('resize', onResize);
  });
}
