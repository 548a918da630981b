/** `exec-server sessions [list | delete ID | show ID | fork ID [--count N] [--memory]] [--json]`. */
import type { ParseArgsConfig } from 'node:util';
import { HttpApi } from '../client/http.ts';
import { clientCommand, connectionOf, UsageError } from './common.ts';

/** `exec-server sessions --help`. */
export const SESSIONS_HELP = `Usage: exec-server sessions [list] [--json]
       exec-server sessions show ID [--json]
       exec-server sessions delete ID... [--json]
       exec-server sessions fork ID [--count N] [--memory] [--json]
           N new sessions from a snapshot of ID (default 1, at most 16); --memory (gVisor):
           its running processes go on in each fork

Options: --url URL (default $EXEC_SERVER_URL or ws://127.0.0.1:8765), --token T (default $EXEC_SERVER_TOKEN), --json`;

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n');
}

/** `sessions list`: a table, or JSON. */
function printSessions(sessions: Awaited<ReturnType<HttpApi['listSessions']>>, json: boolean): void {
  if (json) {
    process.stdout.write(`${JSON.stringify(sessions)}\n`);
  } else if (sessions.length === 0) {
    process.stdout.write('no sessions\n');
  } else {
    const rows = [['SESSION', 'STATUS', 'BACKEND', 'SANDBOX', 'RUNNING', 'ATTACHED', 'CREATED']];
    for (const s of sessions)
      rows.push([
        s.sessionId,
        s.status,
        s.backend,
        s.sandboxType,
        String(s.runningProcesses),
        s.attached ? 'yes' : 'no',
        s.createdAt,
      ]);
    process.stdout.write(`${table(rows)}\n`);
  }
}

const SESSIONS_OPTIONS = {
  count: { type: 'string' },
  memory: { type: 'boolean', default: false },
} as const satisfies ParseArgsConfig['options'];

/** `exec-server sessions`: list, show, delete and fork sessions over the REST API. */
export function sessionsCommand(args: string[]): Promise<number> {
  return clientCommand(args, SESSIONS_OPTIONS, SESSIONS_HELP, async ({ values, positionals }) => {
    const json = values.json === true;
    const { url, token } = connectionOf(values);
    const api = new HttpApi(url, token);
    const [sub = 'list', ...ids] = positionals;
    switch (sub) {
      case 'list':
      case 'ls': {
        printSessions(await api.listSessions(), json);
        return 0;
      }
      case 'show':
      case 'get': {
        if (ids.length !== 1) throw new UsageError('sessions show needs one session id');
        const info = await api.getSession(ids[0]!);
        process.stdout.write(
          json
            ? `${JSON.stringify(info)}\n`
            : `${Object.entries(info)
                .map(([k, v]) => `${k}: ${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
                .join('\n')}\n`,
        );
        return 0;
      }
      case 'delete':
      case 'rm': {
        if (ids.length === 0) throw new UsageError('sessions delete needs a session id');
        for (const id of ids) {
          await api.deleteSession(id);
          if (!json) process.stdout.write(`deleted ${id}\n`);
        }
        if (json) process.stdout.write(`${JSON.stringify({ deleted: ids })}\n`);
        return 0;
      }
      case 'fork': {
        if (ids.length !== 1) throw new UsageError('sessions fork needs one session id');
        const count = values.count === undefined ? 1 : Number(values.count);
        if (!Number.isInteger(count) || count < 1 || count > 16)
          throw new UsageError('--count: expected an integer from 1 to 16');
        const forked = await api.fork(ids[0]!, { count, memory: values.memory === true });
        process.stdout.write(
          json ? `${JSON.stringify(forked)}\n` : `${forked.sessions.map((f) => f.sessionId).join('\n')}\n`,
        );
        return 0;
      }
      default:
        throw new UsageError(`unknown sessions subcommand ${JSON.stringify(sub)}; expected list, show, delete or fork`);
    }
  });
}
