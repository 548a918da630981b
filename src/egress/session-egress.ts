/**
 * One session's egress (docs/architecture.md, "Egress"): its proxy (proxy.ts), the environment
 * that points commands at it, its counts for `session/info` and `/metrics`, and an
 * `egress.connection` audit event per connection.
 */
import type { Duplex } from 'node:stream';
import type { BackendSession } from '../backends/types.ts';
import { execError } from '../errors.ts';
import type { EgressInfo } from '../protocol/index.ts';
import type { AllowEntry } from './allow-list.ts';
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

export interface SessionEgressInit {
  readonly allow: readonly string[];
  readonly entries: readonly AllowEntry[];
  /** Called once per connection, relayed or refused (audit, metrics). */
  readonly onRecord: (r: EgressRecord) => void;
  readonly port?: number | undefined;
  readonly maxConnections?: number | undefined;
}

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
      onRecord: init.onRecord,
    });
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
    await backend.enableEgress(this.port, (conn: Duplex) => this.proxy.handle(conn));
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
