/**
 * One session's egress (docs/architecture.md, "Egress"): its proxy (proxy.ts), the environment
 * that points commands at it, its counts for `session/info` and `/metrics`, and an
 * `egress.connection` audit event per connection.
 */
import type { Duplex } from 'node:stream';
import type { AuditEvent } from '../audit/auditor.ts';
import type { BackendSession } from '../backends/types.ts';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { execError } from '../errors.ts';
import type { EgressInfo } from '../protocol/index.ts';
import type { AllowEntry } from './allow-list.ts';
import type { RelayExit } from './native-relay.ts';
import { EgressProxy, type EgressCounts, type EgressRecord } from './proxy.ts';

/** Where a session finds its proxy: 127.0.0.1:EGRESS_PROXY_PORT inside its own network namespace. */
export const EGRESS_PROXY_PORT = 3128;
/** Connections one session may have open through its proxy at once. */
export const MAX_EGRESS_CONNECTIONS = 64;

/** The variables every command of a session with egress gets (upper and lower case: tools differ). */
export function egressEnvironment(port: number): Record<string, string> {
  const url = `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {};
  for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY']) {
    env[name] = url;
    env[name.toLowerCase()] = url;
  }
  env['NO_PROXY'] = 'localhost,127.0.0.1';
  env['no_proxy'] = 'localhost,127.0.0.1';
  return env;
}

/** What a session's egress is made from: its allow-list, and where its connections are counted and recorded. */
export interface SessionEgressInit {
  readonly allow: readonly string[];
  readonly entries: readonly AllowEntry[];
  /** Where each connection is counted (the server's totals); absent in tests of the proxy alone. */
  readonly metrics?: Metrics | undefined;
  /** Where each connection is recorded (`Session.audit`). */
  readonly audit?: ((event: AuditEvent) => void) | undefined;
  /** Where a relay process that died under the session's connections is told (the session's log). */
  readonly log?: Pick<Logger, 'warn'> | undefined;
  /** Also called once per connection, relayed or refused (tests). */
  readonly onRecord?: ((r: EgressRecord) => void) | undefined;
  readonly port?: number | undefined;
  readonly maxConnections?: number | undefined;
}

/** One connection ended or was refused: counted and audited (never its content). */
function record(init: SessionEgressInit, r: EgressRecord): void {
  const m = init.metrics;
  m?.egressConnections.inc({ result: r.allowed ? 'allowed' : 'refused' });
  if (r.bytesOut > 0) m?.egressBytes.inc({ direction: 'out' }, r.bytesOut);
  if (r.bytesIn > 0) m?.egressBytes.inc({ direction: 'in' }, r.bytesIn);
  init.audit?.({
    action: 'egress.connection',
    actor: { principal: 'system' },
    detail: {
      host: r.host,
      port: r.port,
      method: r.method,
      allowed: r.allowed,
      address: r.address ?? null,
      reason: r.reason ?? null,
      bytesOut: r.bytesOut,
      bytesIn: r.bytesIn,
    },
  });
}

/**
 * The session's relay process ended unasked (a crash, an OOM kill) or under open connections:
 * each of those was recorded with the bytes last reported and why; here it is logged and counted.
 */
function relayExited(init: SessionEgressInit, e: RelayExit): void {
  init.metrics?.egressRelayExits.inc();
  init.log?.warn(
    { relayPid: e.pid, code: e.code, signal: e.signal, openConnections: e.open },
    'egress relay process ended; its open connections ended with the bytes last reported',
  );
}

/** A session's variables with the proxy's laid under them (a session's own `env` may override them). */
export function withEgressEnvironment(
  egress: SessionEgress | undefined,
  env: Readonly<Record<string, string>>,
): Record<string, string> {
  return egress === undefined ? { ...env } : { ...egress.environment, ...env };
}

/** A session's egress (`Session.egress`): its proxy, the environment pointing at it, its counts. */
export class SessionEgress {
  readonly port: number;
  readonly allow: readonly string[];
  readonly proxy: EgressProxy;

  constructor(init: SessionEgressInit) {
    this.port = init.port ?? EGRESS_PROXY_PORT;
    this.allow = init.allow;
    this.proxy = new EgressProxy({
      allow: init.entries,
      maxConnections: init.maxConnections ?? MAX_EGRESS_CONNECTIONS,
      onRecord: (r) => {
        record(init, r);
        init.onRecord?.(r);
      },
      onRelayExit: (e) => relayExited(init, e),
    });
  }

  /** The egress of a session whose spec has `network` (undefined without). */
  static of(
    network: { readonly allow: readonly string[]; readonly entries: readonly AllowEntry[] } | undefined,
    metrics: Metrics,
    audit: (event: AuditEvent) => void,
    log?: Pick<Logger, 'warn'>,
  ): SessionEgress | undefined {
    return network === undefined
      ? undefined
      : new SessionEgress({ allow: network.allow, entries: network.entries, metrics, audit, log });
  }

  get counts(): Readonly<EgressCounts> {
    return this.proxy.counts;
  }

  get environment(): Record<string, string> {
    return egressEnvironment(this.port);
  }

  /** Asks the backend to listen in the session and bring each connection here. */
  async start(backend: BackendSession): Promise<void> {
    if (!backend.enableEgress)
      throw execError(
        'EXEC_ERR_UNSUPPORTED',
        'session.network.allow is not supported by this backend (see docs/architecture.md, "Egress")',
        { detail: { field: 'session.network' } },
      );
    await backend.enableEgress(this.port, (conn: Duplex, offersSocket?: boolean) =>
      this.proxy.handle(conn, offersSocket),
    );
  }

  info(): EgressInfo {
    const c = this.proxy.counts;
    return {
      allow: [...this.allow],
      proxy: `http://127.0.0.1:${this.port}`,
      connections: c.connections,
      refused: c.refused,
      active: c.active,
      bytesOut: c.bytesOut,
      bytesIn: c.bytesIn,
    };
  }

  close(): void {
    this.proxy.close();
  }
}

/** What the helpers below need of a session (src/sessions/session.ts). */
interface EgressSession {
  readonly id: string;
  readonly egress: SessionEgress | undefined;
  onDestroy(cleanup: () => void): () => void;
}

/**
 * A new session's egress, before the session is known to anyone: a session that asked for
 * `network` never runs without its proxy (the error is thrown, and the caller removes the
 * session).
 */
export async function startEgress(session: EgressSession, backend: BackendSession): Promise<void> {
  const egress = session.egress;
  if (egress === undefined) return;
  session.onDestroy(() => egress.close());
  await egress.start(backend);
}

/**
 * A re-adopted session's egress: its agent is asked again (its listener survived; tunnels now
 * come to this server). A failure is logged; the session stays, without its proxy.
 */
export async function restoreEgress(
  session: EgressSession,
  backend: BackendSession,
  log: { warn(obj: object, msg: string): void },
): Promise<void> {
  const egress = session.egress;
  if (egress === undefined) return;
  session.onDestroy(() => egress.close());
  await egress
    .start(backend)
    .catch((err: unknown) => log.warn({ sessionId: session.id, err }, 'egress proxy not restored'));
}
