/**
 * Package entry `exec-server/server`: the server as a library, for a program that embeds it
 * instead of running `exec-server serve`. The same parts the command line puts together:
 *
 *   const config = loadConfig(['--listen', 'ws://127.0.0.1:0'], process.env);
 *   const backend = await createBackend(config, logger);
 *   const app = await buildApp({ config, backend });
 *   await app.listen({ host: '127.0.0.1', port: 0 });
 *
 * `app.close()` ends the sessions and the backend.
 */
export { buildApp } from './app.ts';
export { createBackend } from './backends/create-backend.ts';
export type { Backend } from './backends/types.ts';
export { loadConfig, parseListen, type Config } from './config.ts';
export { silentLogger, type Logger } from './logger.ts';
export { createLogger } from './logging.ts';
export { VERSION } from './version.ts';
