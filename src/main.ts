/**
 * The `exec-server` command line. `serve` (the default, also when the first argument is an
 * option, so `npm start -- --backend docker` works) loads and validates config, builds the
 * backend and the app, listens, prints exactly one `ws://HOST:PORT` line on stdout, and shuts
 * down gracefully on SIGTERM/SIGINT (close-with-grace). A failure to start is one line on
 * stderr (src/cli/boot-errors.ts). Other subcommands are client tools built on the SDK
 * (see `src/cli/`).
 */
import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.ts';
import { createBackend } from './backends/create-backend.ts';
import type { Backend } from './backends/types.ts';
import { describeBootError } from './cli/boot-errors.ts';
import { helpText, loadConfig, parseListen, redactSecretFlags, type Config } from './config.ts';
import { DEFAULT_LISTEN } from './config/listen.ts';
import type { Logger } from './logger.ts';
import { createLogger } from './logging.ts';
import { keepsSessions } from './transport/drain.ts';
import { VERSION } from './version.ts';

const USAGE = `Usage: exec-server [serve] [options]         run the server (the default command)
       exec-server run [options] -- CMD ARGS  run one command in a new session
       exec-server shell [options]            interactive shell in a new session
       exec-server sessions [list|show|delete] list and manage sessions
       exec-server cp SRC DST                 copy files to or from a session
       exec-server mcp [options]              the MCP endpoint of a running server, on stdio
       exec-server audit verify PATH          check the hash chain of an audit log
       exec-server --version | -V

From a clone, \`npm start -- ARGS\` is the same as \`exec-server ARGS\`.
\`exec-server COMMAND --help\` describes a client command.`;

const HELP_FLAGS = new Set(['--help', '-h', 'help']);
const VERSION_FLAGS = new Set(['--version', '-V', 'version']);

async function serve(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  let config: Config | undefined;
  let backend: Backend | undefined;
  let app: FastifyInstance | undefined;
  let logger: ReturnType<typeof createLogger> | undefined;
  try {
    config = loadConfig(argv, process.env);
    const { host, port } = parseListen(config.listen);
    logger = createLogger(config.logLevel, config.logFormat);
    const redacted = redactSecretFlags(argv);
    if (redacted.flags.length > 0) {
      // The process's own command line is rewritten; its parents' (npm, a shell) still show it.
      process.title = ['exec-server', 'serve', ...redacted.argv].join(' ');
      logger.warn(
        { flags: redacted.flags },
        'tokens given as flags are visible in the command lines of the processes that started the server: use EXEC_SERVER_TOKENS or --tokens-file',
      );
    }
    backend = await createBackend(config, logger as unknown as Logger);
    // Fail at boot, with the fix, when the engine is missing: not at the first session.
    if (backend.kind === 'docker') await backend.ping();
    app = await buildApp({ config, backend, logger, holdAuditStdout: true });
    const address = await app.listen({ host, port });
    const bound = app.server.address();
    const actualPort = typeof bound === 'object' && bound ? bound.port : port;
    const shownHost = host.includes(':') ? `[${host}]` : host;
    process.stdout.write(`ws://${shownHost}:${actualPort}\n`);
    // `--audit-log -`: the audit lines follow the address line, never precede it.
    (app.audit as { release?: () => void }).release?.();
    app.log.info({ address, backend: backend.kind, version: VERSION }, 'exec-server listening');
  } catch (err) {
    const failure = describeBootError(err, {
      listen: config?.listen ?? DEFAULT_LISTEN,
      dockerHost: config?.dockerHost,
    });
    if (failure.exitCode === 1) logger?.debug({ err }, 'start failed');
    process.stderr.write(`exec-server: ${failure.message}\n`);
    await (app ? app.close() : backend?.close())?.catch(() => undefined);
    (logger as { flush?: () => void } | undefined)?.flush?.();
    return failure.exitCode;
  }
  const ready = app;
  void reportReadiness(backend, ready);
  // A fleet's rollout: clients are sent to reconnect elsewhere and the sessions stay.
  const keep = keepsSessions(config, backend);
  closeWithGrace({ delay: config.shutdownGraceMs }, async ({ signal, err }) => {
    // A fault of this process is not the operator's stop: the sessions are not the users' loss
    // (docker: kept for the next start, which re-adopts them, as after a kill).
    if (err)
      ready.log.error(
        { err, sessions: ready.keepSessionsOnClose() ? 'kept' : 'ended' },
        'shutting down after an error',
      );
    else ready.log.info({ signal, sessions: keep ? 'kept' : 'ended' }, 'shutting down');
    if (keep && !err) {
      const connections = await ready.drain.start();
      ready.log.info({ connections }, 'drained: clients told to reconnect');
    }
    await ready.close();
  });
  return -1;
}

/** Says at boot what keeps the backend from serving a default session (`/readyz` tells the same). */
async function reportReadiness(backend: Backend, app: FastifyInstance): Promise<void> {
  const reason = await backend.notReadyReason?.().catch((err: unknown) => (err as Error).message);
  if (reason !== undefined) app.log.warn({ reason }, `not ready: ${reason}`);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const [first] = argv;
  let code: number;
  if (first !== undefined && HELP_FLAGS.has(first)) {
    const [, topic] = argv;
    if (topic !== undefined && topic !== 'serve') {
      const { runCli } = await import('./cli/index.ts');
      code = await runCli(topic, ['--help']);
    } else {
      process.stdout.write(`${USAGE}\n\n${helpText()}\n`);
      code = 0;
    }
  } else if (first !== undefined && VERSION_FLAGS.has(first)) {
    process.stdout.write(`exec-server ${VERSION}\n`);
    code = 0;
  } else if (first === undefined || first === 'serve' || first.startsWith('-')) {
    code = await serve(first === 'serve' ? argv.slice(1) : argv);
  } else {
    const { runCli } = await import('./cli/index.ts');
    code = await runCli(first, argv.slice(1));
  }
  if (code >= 0) process.exitCode = code;
}

await main();
