/**
 * The `exec-server` command line. `serve` (the default) loads and validates config, builds
 * the backend and the app, listens, prints exactly one `ws://HOST:PORT` line on stdout, and
 * shuts down gracefully on SIGTERM/SIGINT (close-with-grace). Other subcommands are client
 * tools built on the SDK (see `src/cli/`).
 */
import closeWithGrace from 'close-with-grace';
import { buildApp, createLogger } from './app.ts';
import { createBackend } from './backends/create-backend.ts';
import { ConfigError, helpText, loadConfig, parseListen } from './config.ts';
import type { Logger } from './logger.ts';

async function serve(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  let config;
  try {
    config = loadConfig(argv, process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`exec-server: invalid configuration: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const { host, port } = parseListen(config.listen);
  const logger = createLogger(config.logLevel);
  const backend = await createBackend(config, logger as unknown as Logger);
  let app;
  try {
    app = await buildApp({ config, backend, logger });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`exec-server: invalid configuration: ${err.message}\n`);
      await backend.close();
      return 2;
    }
    throw err;
  }
  const address = await app.listen({ host, port });
  const bound = app.server.address();
  const actualPort = typeof bound === 'object' && bound ? bound.port : port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  process.stdout.write(`ws://${shownHost}:${actualPort}\n`);
  app.log.info({ address, backend: backend.kind }, 'exec-server listening');
  closeWithGrace({ delay: config.shutdownGraceMs }, async ({ signal, err }) => {
    if (err) app.log.error({ err }, 'shutting down after an error');
    else app.log.info({ signal }, 'shutting down');
    await app.close();
  });
  return -1;
}

async function main(): Promise<void> {
  const [command = 'serve', ...rest] = process.argv.slice(2);
  let code: number;
  switch (command) {
    case 'serve':
      code = await serve(rest);
      break;
    case '--help':
    case '-h':
    case 'help':
      process.stdout.write('Usage: exec-server <serve|run|shell|sessions|cp> [options]\n\n' + helpText() + '\n');
      code = 0;
      break;
    default: {
      const { runCli } = await import('./cli/index.ts');
      code = await runCli(command, rest);
    }
  }
  if (code >= 0) process.exitCode = code;
}

await main();
