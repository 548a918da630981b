/**
 * A unix-socket proxy in front of the real engine that a test can stop ("engine down"),
 * wedge ("engine accepts but never answers") and restart, without touching the engine.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { rmSync } from 'node:fs';

export class EngineProxy {
  readonly path: string;
  readonly #target: string;
  #server: Server | undefined;
  readonly #sockets = new Set<Socket>();
  #mode: 'forward' | 'hang' = 'forward';

  constructor(path: string, target = '/var/run/docker.sock') {
    this.path = path;
    this.#target = target;
  }

  get dockerHost(): string {
    return `unix://${this.path}`;
  }

  async start(mode: 'forward' | 'hang' = 'forward'): Promise<void> {
    this.#mode = mode;
    rmSync(this.path, { force: true });
    const server = createServer((client) => {
      this.#sockets.add(client);
      client.on('close', () => this.#sockets.delete(client));
      client.on('error', () => client.destroy());
      if (this.#mode === 'hang') return; // swallow everything, answer nothing
      const upstream = createConnection(this.#target);
      this.#sockets.add(upstream);
      upstream.on('close', () => {
        this.#sockets.delete(upstream);
        client.destroy();
      });
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(this.path, resolve));
    this.#server = server;
  }

  /** Closes the listener and cuts every connection (like an engine that went away). */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const s of this.#sockets) s.destroy();
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(this.path, { force: true });
  }
}
