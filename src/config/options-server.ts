/**
 * Options of the server: the listening address, authentication, the backend with its engine or
 * workspaces, logging. One part of the option table that
 * src/config.ts puts together in this order (the order of `--help` and docs/guide.md).
 */
import { accessSync, constants as fsConstants } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { OptionDef } from './option-def.ts';
import { DEFAULT_LISTEN } from './listen.ts';

/** Whether `dir` could be made: its nearest existing ancestor is a directory we may write. */
function canMake(dir: string): boolean {
  for (let d = dir; ; d = dirname(d)) {
    try {
      accessSync(d, fsConstants.W_OK);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || d === dirname(d)) return false;
    }
  }
}

/**
 * Local workspaces live outside every default writable root of a sandbox (the workspace, /tmp):
 * under /tmp, one session's commands could write into another's workspace. Where the home
 * directory cannot be written (an image on a read-only root filesystem, where only /tmp is
 * writable), a directory of this user's under the temp dir: sandboxed commands see a private
 * /tmp there, and the server's own directory is closed to others.
 */
function defaultWorkspaceRoot(): string {
  if (process.getuid?.() === 0) return '/var/lib/exec-server/workspaces';
  const state = join(process.env['XDG_STATE_HOME'] ?? join(homedir(), '.local', 'state'), 'exec-server', 'workspaces');
  return canMake(state) ? state : join(tmpdir(), `exec-server-${process.getuid?.() ?? 'user'}`, 'workspaces');
}

/** Listening, authentication, the backend and its engine or workspaces, logging (one part of the option table). */
export const SERVER_OPTIONS = {
  listen: {
    flag: 'listen',
    env: 'EXEC_SERVER_LISTEN',
    kind: 'string',
    default: DEFAULT_LISTEN,
    description: 'Address to serve WebSocket and HTTP on, `ws://HOST:PORT` (port 0 = any free port).',
  },
  backend: {
    flag: 'backend',
    env: 'EXEC_SERVER_BACKEND',
    kind: 'enum',
    values: ['local', 'docker', 'auto'],
    default: 'local',
    description:
      'Where sessions run: `local` (workspace dirs on this host), `docker` (a container per session), `auto` (docker when an engine answers, else local).',
  },
  token: {
    flag: 'token',
    env: 'EXEC_SERVER_TOKEN',
    kind: 'string',
    default: undefined,
    secret: true,
    description:
      'Bearer token required on every route but /healthz and /readyz (also read from `CODEX_EXEC_SERVER_CONNECTION_TOKEN`).',
  },
  tokens: {
    flag: 'tokens',
    env: 'EXEC_SERVER_TOKENS',
    kind: 'string',
    default: undefined,
    secret: true,
    description: 'Several tenants: `alice:TOKEN1,bob:TOKEN2`.',
  },
  tokensFile: {
    flag: 'tokens-file',
    env: 'EXEC_SERVER_TOKENS_FILE',
    kind: 'string',
    default: undefined,
    description: 'File with one `tenant:token` per line (`#` comments allowed).',
  },
  allowedOrigins: {
    flag: 'allowed-origins',
    env: 'EXEC_SERVER_ALLOWED_ORIGINS',
    kind: 'string',
    default: undefined,
    description:
      "Comma-separated browser origins (`https://app.example.com`) that may call the API, its WebSockets and `/mcp` besides the server's own (the console); a request with another `Origin` is refused with 403 (a preview application's own HTTP requests excepted), one without (non-browser clients) passes.",
  },
  insecureNoAuth: {
    flag: 'insecure-no-auth',
    env: 'EXEC_SERVER_INSECURE_NO_AUTH',
    kind: 'bool',
    default: false,
    description: 'Allow binding a non-loopback address without a token.',
  },
  image: {
    flag: 'image',
    env: 'EXEC_SERVER_IMAGE',
    kind: 'string',
    default: 'exec-server-session:latest',
    description: 'Default session image (docker backend).',
  },
  dockerHost: {
    flag: 'docker-host',
    env: 'EXEC_SERVER_DOCKER_HOST',
    kind: 'string',
    default: undefined,
    description:
      'Docker engine address (`unix:///path` or `tcp://host:port`), or several separated by commas (a pool: new sessions go to the healthy engine with the fewest); falls back to `DOCKER_HOST`, then the default socket.',
  },
  workspaceRoot: {
    flag: 'workspace-root',
    env: 'EXEC_SERVER_WORKSPACE_ROOT',
    kind: 'string',
    default: defaultWorkspaceRoot(),
    description:
      'Local backend: directory holding one workspace directory per session (outside /tmp, which sandboxed commands see as a private /tmp of their session).',
  },
  ptyPin: {
    flag: 'pty-pin',
    env: 'EXEC_SERVER_PTY_PIN',
    kind: 'bool',
    default: false,
    description:
      "Pin a PTY command streaming fast to one CPU with its reader (the local backend's relay, the docker backend's agent) while it streams (faster terminals on VMs; changes the command's CPU affinity, so off unless turned on; see docs/architecture.md).",
  },
  logLevel: {
    flag: 'log-level',
    env: 'EXEC_SERVER_LOG_LEVEL',
    kind: 'enum',
    values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    default: 'info',
    description:
      'Log level: `info` logs lifecycle events (sessions created and reaped, processes lost, policy decisions), `debug` adds one line per request.',
  },
  logFormat: {
    flag: 'log-format',
    env: 'EXEC_SERVER_LOG_FORMAT',
    kind: 'enum',
    values: ['auto', 'json', 'pretty'],
    default: 'auto',
    description:
      'Log lines on stderr: `json` (pino), `pretty` (one readable line each), `auto` (pretty when stderr is a terminal, else json).',
  },
} as const satisfies Record<string, OptionDef>;
