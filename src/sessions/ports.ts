/**
 * The ports a session exposes, and the proxied connections to them. Each session owns one
 * `SessionPorts` (`Session.ports`), made with it and with the limits of the server's
 * configuration (`--preview-max-ports`, `--preview-max-connections`: each connection is a relay
 * in the session). Exposing needs a session that allows it (`previewPorts: true` in its spec).
 * Closing a port, or the end of the session, ends its connections.
 */
import type { Duplex } from 'node:stream';
import type { BackendSession } from '../backends/types.ts';
import { execError } from '../errors.ts';
import { resolveSandbox, sessionWorkspaces, type SessionPolicy } from '../policy/sandbox-policy.ts';
import type { ExposedPort } from '../protocol/index.ts';

/** A session's bounds on its preview ports and their connections. */
export interface PortLimits {
  /** Ports one session exposes at most. */
  readonly maxPorts: number;
  /** Proxied connections in flight per session at most. */
  readonly maxConnections: number;
}

/** What the ports need of their session (the session itself: Session implements it). */
export interface PortsHost {
  readonly id: string;
  readonly spec: { readonly previewPorts: boolean; readonly policy: SessionPolicy };
  readonly backend: Pick<BackendSession, 'workdir' | 'connectPort'>;
  /** Throws EXEC_ERR_SESSION_DEAD once the session lost its backend. */
  assertAlive(): void;
  /** Stores the session's record (its exposed ports among it): a successor serves them too. */
  persistRecord(): Promise<void>;
}

/** A session's exposed preview ports (`Session.ports`): kept with its record, connected through its backend. */
export class SessionPorts {
  readonly #host: PortsHost;
  readonly #limits: PortLimits;
  readonly #ports = new Map<number, ExposedPort>();
  readonly #connections = new Map<Duplex, number>();
  #closed = false;

  /** Made by the session itself; closed by its `destroy()`. */
  constructor(host: PortsHost, limits: PortLimits) {
    this.#host = host;
    this.#limits = limits;
  }

  /** The exposed ports, lowest first (what `session/info` lists). */
  list(): ExposedPort[] {
    return [...this.#ports.values()].sort((a, b) => a.port - b.port);
  }

  has(port: number): boolean {
    return this.#ports.has(port);
  }

  /**
   * Exposes `port` (again: the same answer); resolves once the session's record lists it, so a
   * replica that takes the session over, or a restarted server, serves its URLs too.
   */
  async expose(port: number): Promise<ExposedPort> {
    const host = this.#host;
    if (!host.spec.previewPorts)
      throw execError(
        'EXEC_ERR_REJECTED',
        'preview ports are off for this session; create it with "previewPorts": true',
      );
    host.assertAlive();
    if (typeof host.backend.connectPort !== 'function')
      throw execError('EXEC_ERR_UNSUPPORTED', 'this backend cannot reach ports of its sessions');
    const existing = this.#ports.get(port);
    if (existing) return existing;
    if (this.#ports.size >= this.#limits.maxPorts)
      throw execError('EXEC_ERR_PROCESS_LIMIT', `a session exposes at most ${this.#limits.maxPorts} ports`);
    const exposed = { port, exposedAt: new Date().toISOString() };
    this.#ports.set(port, exposed);
    try {
      await host.persistRecord();
    } catch (err) {
      // Not stored: not exposed, rather than exposed until the next restart only.
      if (this.#ports.get(port) === exposed) this.#ports.delete(port);
      throw err;
    }
    return exposed;
  }

  /**
   * Stops exposing `port` and ends its connections, once the record no longer lists it; false
   * when it was not exposed. A record that cannot be stored leaves the port exposed (the error
   * says so): dropped only here, a restart or a take-over would expose it again unseen.
   */
  async close(port: number): Promise<boolean> {
    const exposed = this.#ports.get(port);
    if (exposed === undefined) return false;
    this.#ports.delete(port);
    try {
      await this.#host.persistRecord();
    } catch (err) {
      if (!this.#ports.has(port) && !this.#closed) this.#ports.set(port, exposed);
      throw err;
    }
    for (const [stream, p] of this.#connections) if (p === port) stream.destroy();
    return true;
  }

  /** The ports a recovered session's record lists (its previous server exposed them). */
  restore(ports: readonly ExposedPort[]): void {
    for (const p of ports) if (this.#ports.size < this.#limits.maxPorts) this.#ports.set(p.port, p);
  }

  /** A new connection to an exposed port, tracked so closing the port or the session ends it. */
  async open(port: number): Promise<Duplex> {
    const host = this.#host;
    if (this.#closed || !this.#ports.has(port))
      throw execError('EXEC_ERR_NOT_FOUND', `port ${port} of session ${host.id} is not exposed`);
    if (this.#connections.size >= this.#limits.maxConnections)
      throw execError('EXEC_ERR_BUSY', `too many preview connections to this session (${this.#limits.maxConnections})`);
    const connect = host.backend.connectPort;
    if (!connect) throw execError('EXEC_ERR_UNSUPPORTED', 'this backend cannot reach ports of its sessions');
    const stream = await connect.call(
      host.backend,
      port,
      resolveSandbox(host.spec.policy, sessionWorkspaces(host.backend)),
    );
    if (this.#closed || !this.#ports.has(port)) {
      stream.destroy();
      throw execError('EXEC_ERR_NOT_FOUND', `port ${port} of session ${host.id} was closed`);
    }
    this.#connections.set(stream, port);
    stream.once('close', () => this.#connections.delete(stream));
    return stream;
  }

  /** The session ends: no ports any more, and every connection is ended. */
  closeAll(): void {
    this.#closed = true;
    this.#ports.clear();
    for (const stream of this.#connections.keys()) stream.destroy();
    this.#connections.clear();
  }
}
