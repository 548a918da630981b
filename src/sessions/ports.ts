/**
 * The ports a session exposes, and the proxied connections to them. Exposing needs a session
 * that allows it (`previewPorts: true` in its spec); at most `MAX_PORTS` ports per session and
 * `MAX_CONNECTIONS` connections in flight per session (each is a relay in the session). Closing
 * a port, or the end of the session, ends its connections.
 */
import type { Duplex } from 'node:stream';
import { execError } from '../errors.ts';
import { resolveSandbox } from '../policy/sandbox-policy.ts';
import type { Session } from '../sessions/session.ts';

export const MAX_PORTS = 16;
export const MAX_CONNECTIONS = 64;

export interface ExposedPort {
  readonly port: number;
  readonly exposedAt: string;
}

class SessionPorts {
  readonly ports = new Map<number, ExposedPort>();
  readonly connections = new Map<Duplex, number>();
  closed = false;

  close(): void {
    this.closed = true;
    this.ports.clear();
    for (const stream of this.connections.keys()) stream.destroy();
    this.connections.clear();
  }
}

const registry = new WeakMap<Session, SessionPorts>();

function portsOf(session: Session): SessionPorts {
  let ports = registry.get(session);
  if (!ports) {
    const created = new SessionPorts();
    registry.set(session, created);
    session.onDestroy(() => created.close());
    ports = created;
  }
  return ports;
}

/** The exposed ports of `session`, lowest first (what `session/info` lists). */
export function exposedPorts(session: Session): ExposedPort[] {
  const ports = registry.get(session);
  return ports ? [...ports.ports.values()].sort((a, b) => a.port - b.port) : [];
}

export function isExposed(session: Session, port: number): boolean {
  return registry.get(session)?.ports.has(port) ?? false;
}

export function exposePort(session: Session, port: number): ExposedPort {
  if (!session.spec.previewPorts) throw execError('EXEC_ERR_REJECTED', 'preview ports are off for this session; create it with "previewPorts": true');
  if (session.status.status === 'dead') throw execError('EXEC_ERR_SESSION_DEAD', `session is dead: ${session.status.reason}`);
  if (typeof session.backend.connectPort !== 'function') throw execError('EXEC_ERR_UNSUPPORTED', 'this backend cannot reach ports of its sessions');
  const ports = portsOf(session);
  const existing = ports.ports.get(port);
  if (existing) return existing;
  if (ports.ports.size >= MAX_PORTS) throw execError('EXEC_ERR_PROCESS_LIMIT', `a session exposes at most ${MAX_PORTS} ports`);
  const exposed = { port, exposedAt: new Date().toISOString() };
  ports.ports.set(port, exposed);
  return exposed;
}

/** Stops exposing `port` and ends its connections; false when it was not exposed. */
export function closePort(session: Session, port: number): boolean {
  const ports = registry.get(session);
  if (!ports?.ports.delete(port)) return false;
  for (const [stream, p] of ports.connections) if (p === port) stream.destroy();
  return true;
}

/** A new connection to an exposed port, tracked so closing the port or the session ends it. */
export async function openConnection(session: Session, port: number): Promise<Duplex> {
  const ports = registry.get(session);
  if (!ports || ports.closed || !ports.ports.has(port)) throw execError('EXEC_ERR_NOT_FOUND', `port ${port} of session ${session.id} is not exposed`);
  if (ports.connections.size >= MAX_CONNECTIONS) throw execError('EXEC_ERR_BUSY', `too many preview connections to this session (${MAX_CONNECTIONS})`);
  const connect = session.backend.connectPort;
  if (!connect) throw execError('EXEC_ERR_UNSUPPORTED', 'this backend cannot reach ports of its sessions');
  const stream = await connect.call(session.backend, port, resolveSandbox(session.spec.policy, session.backend.workdir));
  if (ports.closed || !ports.ports.has(port)) {
    stream.destroy();
    throw execError('EXEC_ERR_NOT_FOUND', `port ${port} of session ${session.id} was closed`);
  }
  ports.connections.set(stream, port);
  stream.once('close', () => ports.connections.delete(stream));
  return stream;
}
