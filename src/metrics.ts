/**
 * Prometheus metrics (prom-client) on a registry owned by one app instance, so tests can
 * build many apps without "metric already registered". Names follow Prometheus conventions:
 * `exec_server_` prefix, base units, `_total` on counters, no unbounded labels.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { EngineReport, MemoryCheckpointTotals, WarmPoolReport } from './backends/types.ts';

/** What `watchEgress` reads of a session's egress. */
export interface EgressCountsView {
  readonly connections: number;
  readonly refused: number;
  readonly active: number;
  readonly bytesOut: number;
  readonly bytesIn: number;
}

/** The server's Prometheus metrics (`exec_server_*`) on a registry of its own, one per app. */
export class Metrics {
  readonly registry = new Registry();
  readonly sessionsActive: Gauge = this.#gauge('exec_server_sessions_active', 'Sessions currently alive');
  readonly sessionsCreated: Counter<'result'> = this.#counter(
    'exec_server_sessions_created_total',
    'Session creations by result',
    ['result'],
  );
  readonly processesStarted: Counter<'mode' | 'sandbox'> = this.#counter(
    'exec_server_processes_started_total',
    'Processes started',
    ['mode', 'sandbox'],
  );
  readonly processExits: Counter<'terminal'> = this.#counter(
    'exec_server_process_exits_total',
    'Processes ended, by terminal state',
    ['terminal'],
  );
  readonly policyDecisions: Counter<'outcome'> = this.#counter(
    'exec_server_policy_decisions_total',
    'Policy gate decisions, by outcome',
    ['outcome'],
  );
  readonly approvals: Counter<'purpose' | 'decision'> = this.#counter(
    'exec_server_approvals_total',
    'Approval requests, by purpose and decision',
    ['purpose', 'decision'],
  );
  readonly streamBytes: Counter<'stream'> = this.#counter(
    'exec_server_stream_bytes_total',
    'Bytes moved through process streams',
    ['stream'],
  );
  readonly wsConnections: Gauge = this.#gauge('exec_server_websocket_connections_active', 'Open WebSocket connections');
  readonly connectionsRefused: Counter<'limit'> = this.#counter(
    'exec_server_connections_refused_total',
    "Requests refused because the connections were at their limit (server: --max-connections, tenant: a tenant's WebSockets), and connections closed for holding a place idle (headers, idle: a request body or a response not moving, initialize: a WebSocket's first message, ping: a WebSocket's peer answering no ping)",
    ['limit'],
  );
  readonly wsSlowConsumers: Counter = this.#counter(
    'exec_server_websocket_slow_consumer_disconnects_total',
    'Clients disconnected for not reading fast enough',
  );
  readonly rpcRequests: Counter<'method' | 'result'> = this.#counter(
    'exec_server_rpc_requests_total',
    'JSON-RPC requests by method and result',
    ['method', 'result'],
  );
  readonly startLatency: Histogram<'sandbox'> = new Histogram({
    name: 'exec_server_process_start_duration_seconds',
    help: 'process/start until the process runs',
    labelNames: ['sandbox'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [this.registry],
  });
  readonly backendErrors: Counter<'operation'> = this.#counter(
    'exec_server_backend_errors_total',
    'Backend operation failures',
    ['operation'],
  );
  readonly diskLimitExceeded: Counter<'backend'> = this.#counter(
    'exec_server_disk_limit_exceeded_total',
    'Sessions found past their disk limit by the disk watch (their processes were ended)',
    ['backend'],
  );
  readonly forks: Counter<'memory' | 'result'> = this.#counter(
    'exec_server_forks_total',
    'Fork requests (POST /v1/sessions/{id}/fork, session/fork), with or without memory, by result',
    ['memory', 'result'],
  );
  readonly egressConnections: Counter<'result'> = this.#counter(
    'exec_server_egress_connections_total',
    'Connections through session egress proxies, by result (allowed, refused)',
    ['result'],
  );
  readonly egressBytes: Counter<'direction'> = this.#counter(
    'exec_server_egress_bytes_total',
    'Bytes through session egress proxies (out: sent by sessions, in: received)',
    ['direction'],
  );
  readonly egressRelayExits: Counter = this.#counter(
    'exec_server_egress_relay_exits_total',
    'Egress relay processes (one per session proxy) that ended unasked or under open connections; those connections ended with the bytes last reported',
  );
  readonly #egressSources: Array<() => Iterable<{ id: string; counts: Readonly<EgressCountsView> }>> = [];

  constructor(options: { defaultMetrics?: boolean } = {}) {
    if (options.defaultMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'exec_server_' });
  }

  #counter<L extends string = string>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
    return new Counter({ name, help, labelNames, registers: [this.registry] });
  }

  #gauge(name: string, help: string): Gauge {
    return new Gauge({ name, help, registers: [this.registry] });
  }

  /**
   * Memory checkpoints kept (live templates, forks) and their bytes, read at scrape time; with
   * `cleanupFailures` where the backend counts them (a docker engine's checkpoint store).
   */
  watchCheckpoints(totals: () => MemoryCheckpointTotals): void {
    const registers = [this.registry];
    new Counter({
      name: 'exec_server_snapshot_cleanup_failures_total',
      help: 'Memory snapshots that failed and whose image or checkpoint could not be removed (left behind, logged with their ids)',
      labelNames: ['leftover'],
      registers,
      collect() {
        const failures = totals().cleanupFailures;
        if (failures === undefined) return;
        this.reset();
        for (const [leftover, n] of Object.entries(failures)) this.inc({ leftover }, n);
      },
    });
    new Gauge({
      name: 'exec_server_memory_checkpoints',
      help: 'Memory checkpoints the server keeps for live templates and forks',
      registers,
      collect() {
        this.set(totals().count);
      },
    });
    new Gauge({
      name: 'exec_server_memory_checkpoint_bytes',
      help: 'Bytes of the memory checkpoints the server keeps',
      registers,
      collect() {
        this.set(totals().bytes);
      },
    });
  }

  /**
   * Per-session egress counts, read at scrape time from the live sessions (the `session` label is
   * bounded by the server's session limit; a session's series go with it).
   */
  watchEgress(source: () => Iterable<{ id: string; counts: Readonly<EgressCountsView> }>): void {
    this.#egressSources.push(source);
    if (this.#egressSources.length > 1) return;
    const all = this.#egressSources;
    const sessions = function* (): Iterable<{ id: string; counts: Readonly<EgressCountsView> }> {
      for (const s of all) yield* s();
    };
    const registers = [this.registry];
    new Gauge({
      name: 'exec_server_egress_session_connections',
      help: 'Egress connections of each live session with a network allow-list, by result (allowed, refused, active)',
      labelNames: ['session', 'result'],
      registers,
      collect() {
        this.reset();
        for (const s of sessions()) {
          this.set({ session: s.id, result: 'allowed' }, s.counts.connections);
          this.set({ session: s.id, result: 'refused' }, s.counts.refused);
          this.set({ session: s.id, result: 'active' }, s.counts.active);
        }
      },
    });
    new Gauge({
      name: 'exec_server_egress_session_bytes',
      help: 'Egress bytes of each live session with a network allow-list (out: sent by the session, in: received)',
      labelNames: ['session', 'direction'],
      registers,
      collect() {
        this.reset();
        for (const s of sessions()) {
          this.set({ session: s.id, direction: 'out' }, s.counts.bytesOut);
          this.set({ session: s.id, direction: 'in' }, s.counts.bytesIn);
        }
      },
    });
  }

  /**
   * Warm pools, read at scrape time: what each holds and aims at. The `pool` label is bounded by
   * the configured runtimes and `--warm-pool-templates`. A replica is ready to serve a template's
   * sessions at once when its pool's `ready` reaches its `target`.
   */
  watchWarmPools(pools: () => readonly WarmPoolReport[]): void {
    const registers = [this.registry];
    new Gauge({
      name: 'exec_server_warm_pool_ready',
      help: 'Containers waiting in each warm pool (a runtime, or template:NAME for a live template)',
      labelNames: ['pool'],
      registers,
      collect() {
        for (const p of pools()) this.set({ pool: p.pool }, p.ready);
      },
    });
    new Gauge({
      name: 'exec_server_warm_pool_target',
      help: 'The size each warm pool aims at now (self-sized from demand; a template pool once its template is found)',
      labelNames: ['pool'],
      registers,
      collect() {
        for (const p of pools()) this.set({ pool: p.pool }, p.target);
      },
    });
  }

  /**
   * Per-engine gauges of a pool of engines, read at scrape time. The `engine` label is bounded
   * by the configured engines (at most 64).
   */
  watchEngines(engines: () => readonly EngineReport[]): void {
    const registers = [this.registry];
    new Gauge({
      name: 'exec_server_engine_up',
      help: 'Whether a docker engine of the pool answers (1) or not (0)',
      labelNames: ['engine'],
      registers,
      collect() {
        for (const e of engines()) this.set({ engine: e.engine }, e.healthy ? 1 : 0);
      },
    });
    new Gauge({
      name: 'exec_server_engine_sessions',
      help: 'Sessions this server holds on each docker engine of the pool',
      labelNames: ['engine'],
      registers,
      collect() {
        for (const e of engines()) this.set({ engine: e.engine }, e.sessions);
      },
    });
  }
}
