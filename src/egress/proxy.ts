/**
 * The server's side of a session's egress proxy (docs/architecture.md, "Egress"). Each tunnel
 * the session's agent carries here (one per connection a command made to 127.0.0.1:PORT) speaks
 * HTTP proxying: `CONNECT host:port` (TLS, raw TCP) or one absolute-URI request
 * (`GET http://host:port/path`). The proxy resolves the host itself, decides from the resolved
 * addresses (decision.ts) and dials exactly the address it checked; a refusal is a `403` whose
 * body says why, and nothing is dialled. A decided connection whose ends are both sockets goes to
 * the native splice relay (native-relay.ts); any other is `pipe()`d both ways here
 * (backpressure bounds the bytes in flight to the streams' buffers).
 *
 * A forwarded HTTP request is sent with `Connection: close`: one request per connection, so the
 * proxy never parses a response and each request is decided on its own.
 *
 * Bounded per session: `maxConnections` relayed at once, and apart from them at most
 * `maxHeads` connections whose request head is still being read, each for at most
 * `headTimeoutMs`. A connection that finds `maxHeads` heads in progress takes the place of the
 * oldest if that one has waited `headYieldMs` (it is answered 408), and is answered 429
 * otherwise: a command that holds unfinished heads (slowloris) delays the others' connections
 * by at most `headYieldMs`, and never blocks the relayed ones.
 */
import { lookup } from 'node:dns/promises';
import { connect, isIP, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { AllowEntry } from './allow-list.ts';
import { decideEgress, mayAllowName } from './decision.ts';
import {
  canRelayNatively,
  type Moved,
  NativeRelays,
  offersClientSocket,
  plainTunnel,
  type RelayExit,
} from './native-relay.ts';
import { headEnd, MAX_HEAD_BYTES, parseRequestHead, splitAuthority, type Target } from './request-head.ts';

// Where the head parsing lived before request-head.ts: its callers keep importing it from here.
export { parseRequestHead, splitAuthority };

/** Request heads read at once per session, by default (the relayed connections apart). */
export const MAX_HEADS = 64;
/** How long a request head may take, by default. Clients send theirs at once. */
export const HEAD_TIMEOUT_MS = 10_000;
/** How long a head in progress keeps its place when `maxHeads` are waiting, by default. */
export const HEAD_YIELD_MS = 1_000;
const LOOKUP_TIMEOUT_MS = 5_000;
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * One connection as it ended, for the audit log and the counters. `host`, `port` and `method`
 * are null for a connection answered before its request head said where it was going (a head
 * too large, malformed or too slow, or no place to read it): a probe shows in the log too.
 */
export interface EgressRecord {
  readonly host: string | null;
  readonly port: number | null;
  readonly method: string | null;
  readonly allowed: boolean;
  readonly address?: string | undefined;
  readonly reason?: string | undefined;
  /** Session → destination, and back. */
  readonly bytesOut: number;
  readonly bytesIn: number;
}

/** A session's egress so far, as `session/info` reports it. */
export interface EgressCounts {
  connections: number;
  refused: number;
  active: number;
  bytesOut: number;
  bytesIn: number;
  /** Connections whose client socket the native relay took from the agent (tests, benchmarks). */
  tookSocket: number;
}

/** What a session's egress proxy decides and bounds by: its allow-list and its limits. */
export interface EgressProxyOptions {
  readonly allow: readonly AllowEntry[];
  /** Connections relayed at once; further ones are answered 429. */
  readonly maxConnections: number;
  /** Request heads read at once (default MAX_HEADS); see the module's comment. */
  readonly maxHeads?: number | undefined;
  /** Default HEAD_TIMEOUT_MS. */
  readonly headTimeoutMs?: number | undefined;
  /** Default HEAD_YIELD_MS. */
  readonly headYieldMs?: number | undefined;
  /** Called once per connection when it ends (or is refused). */
  readonly onRecord?: ((r: EgressRecord) => void) | undefined;
  /** false: relay in JavaScript even where the native relay could take over (tests, benchmarks). */
  readonly native?: boolean | undefined;
  /** The resolver (tests); default: the system's (`getaddrinfo`). */
  readonly resolve?: ((host: string) => Promise<string[]>) | undefined;
  /** The native relay process ended unasked or under open connections (each is recorded too). */
  readonly onRelayExit?: ((e: RelayExit) => void) | undefined;
}

/** A connection whose request head is being read. */
interface PendingHead {
  readonly since: number;
  /** Answers it (408) and stops reading it: a newer connection takes its place. */
  readonly evict: () => void;
}

async function systemResolve(host: string): Promise<string[]> {
  const timeout = new Promise<never>((_, reject) =>
    setTimeout(
      // Not a registry error: the client of the egress proxy gets it as its 502 text.
      () => reject(new Error(`no answer for ${host} within ${LOOKUP_TIMEOUT_MS} ms`)),
      LOOKUP_TIMEOUT_MS,
    ).unref(),
  );
  const found = await Promise.race([lookup(host, { all: true, verbatim: true }), timeout]);
  return found.map((a) => a.address);
}

function answer(client: Duplex, status: string, body: string): void {
  const text = `${body}\n`;
  plainTunnel(client);
  client.end(
    `HTTP/1.1 ${status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\nX-Exec-Server-Egress: ${status.startsWith('403') ? 'refused' : 'error'}\r\n\r\n${text}`,
  );
  // Nothing more is read from it: closed once the answer is out, not when the client ends, since
  // a client that never ends would keep its tunnel (and the agent's slot for it) forever. Only a
  // socket: closing another stream (gVisor's exec-stream tunnel) could cut the answer short.
  if (client instanceof Socket) client.once('finish', () => client.destroy());
}

/** One session's egress proxy: decides and relays every tunnel its agent brings. */
export class EgressProxy {
  readonly counts: EgressCounts = {
    connections: 0,
    refused: 0,
    active: 0,
    bytesOut: 0,
    bytesIn: 0,
    tookSocket: 0,
  };
  readonly #o: EgressProxyOptions;
  readonly #open = new Set<Duplex>();
  /** Connections whose head is being read, oldest first. */
  readonly #heads = new Map<Duplex, PendingHead>();
  readonly #native: NativeRelays;
  #closed = false;

  constructor(o: EgressProxyOptions) {
    this.#o = o;
    this.#native = new NativeRelays({ onExit: o.onRelayExit });
  }

  /**
   * Serves one tunnel (a command's connection to the proxy). `offersSocket`: its agent can hand
   * the client's socket to the native relay (an `EXAGTUN2` tunnel; native-relay.ts).
   */
  handle(client: Duplex, offersSocket = false): void {
    if (this.#closed) {
      client.destroy();
      return;
    }
    if (offersSocket) offersClientSocket(client);
    client.on('error', () => undefined);
    this.#open.add(client);
    client.once('close', () => this.#open.delete(client));
    if (!this.#admitHead()) {
      this.#refuseEarly(client, '429 Too Many Requests', `${this.#maxHeads} request heads already in progress`);
      return;
    }
    void this.#readHead(client)
      .then((got) => (got === undefined ? undefined : this.#serve(client, got.head, got.rest)))
      .catch(() => client.destroy());
  }

  /** Ends every connection (the session is gone). */
  close(): void {
    this.#closed = true;
    for (const c of this.#open) c.destroy();
    this.#open.clear();
    // Each relayed connection still reports its bytes (and is recorded) as it stops.
    this.#native.close();
  }

  get #maxHeads(): number {
    return this.#o.maxHeads ?? MAX_HEADS;
  }

  /**
   * Whether a new connection may have its head read: a place is free, or the oldest head in
   * progress has had `headYieldMs` and gives its place up (answered 408).
   */
  #admitHead(): boolean {
    if (this.#heads.size < this.#maxHeads) return true;
    const oldest = this.#heads.values().next().value;
    if (oldest === undefined || performance.now() - oldest.since < (this.#o.headYieldMs ?? HEAD_YIELD_MS)) return false;
    oldest.evict();
    return true;
  }

  #readHead(client: Duplex): Promise<{ head: string; rest: Buffer } | undefined> {
    const limit = this.#o.headTimeoutMs ?? HEAD_TIMEOUT_MS;
    const yieldMs = this.#o.headYieldMs ?? HEAD_YIELD_MS;
    return new Promise((resolve) => {
      let buf = Buffer.alloc(0);
      const finish = (v: { head: string; rest: Buffer } | undefined, status?: string, why?: string): void => {
        clearTimeout(timer);
        this.#heads.delete(client);
        client.off('data', onData);
        client.off('end', onEnd);
        client.off('close', onClose);
        if (status !== undefined) this.#refuseEarly(client, status, why ?? status);
        resolve(v);
      };
      const timer = setTimeout(
        () => finish(undefined, '408 Request Timeout', `no complete request head within ${limit} ms`),
        limit,
      );
      this.#heads.set(client, {
        since: performance.now(),
        evict: () =>
          finish(
            undefined,
            '408 Request Timeout',
            `request head not complete after ${yieldMs} ms while ${this.#maxHeads} others were being read`,
          ),
      });
      const onData = (d: Buffer): void => {
        const from = buf.length;
        buf = Buffer.concat([buf, d]);
        // The limit holds for the whole head, however it arrives (one segment or many).
        const end = headEnd(buf, from);
        if (end > MAX_HEAD_BYTES || (end < 0 && buf.length > MAX_HEAD_BYTES))
          finish(undefined, '431 Request Header Fields Too Large', `request head larger than ${MAX_HEAD_BYTES} bytes`);
        else if (end >= 0) {
          client.pause();
          finish({ head: buf.subarray(0, end).toString('latin1'), rest: buf.subarray(end) });
        }
      };
      const onEnd = (): void => {
        finish(undefined);
        client.destroy();
      };
      // Destroyed meanwhile (the session closed): its place and timer go with it.
      const onClose = (): void => finish(undefined);
      client.on('data', onData);
      client.once('end', onEnd);
      client.once('close', onClose);
      client.resume();
    });
  }

  async #serve(client: Duplex, head: string, rest: Buffer): Promise<void> {
    const target = parseRequestHead(head);
    if (typeof target === 'string') {
      this.#refuseEarly(client, '400 Bad Request', target);
      return;
    }
    const refuse = (reason: string, status = '403 Forbidden'): void => {
      this.counts.refused++;
      this.#record(target, { allowed: false, reason, bytesOut: 0, bytesIn: 0 });
      answer(client, status, `exec-server egress: refused: ${reason}`);
    };
    if (this.counts.active >= this.#o.maxConnections)
      return refuse(`${this.#o.maxConnections} connections already open`, '429 Too Many Requests');
    if (isIP(target.host) === 0 && !mayAllowName(this.#o.allow, target.host, target.port))
      return refuse(`${target.host}:${target.port} is not in the session's allow-list`);
    let addresses: string[];
    try {
      addresses = isIP(target.host) !== 0 ? [target.host] : await (this.#o.resolve ?? systemResolve)(target.host);
    } catch (err) {
      const why = `cannot resolve ${target.host}: ${(err as Error).message}`;
      this.counts.refused++;
      this.#record(target, { allowed: false, reason: why, bytesOut: 0, bytesIn: 0 });
      answer(client, '502 Bad Gateway', `exec-server egress: ${why}`);
      return;
    }
    const decision = decideEgress(this.#o.allow, target.host, target.port, addresses);
    if (!decision.allowed) return refuse(decision.reason);
    this.#relay(client, target, decision.address, rest);
  }

  #relay(client: Duplex, target: Target, address: string, rest: Buffer): void {
    this.counts.active++;
    this.counts.connections++;
    const upstream: Socket = connect({ host: address, port: target.port, noDelay: true });
    let bytesOut = 0;
    let bytesIn = 0;
    let connected = false;
    let ended = false;
    const end = (reason?: string): void => {
      if (ended) return;
      ended = true;
      this.counts.active--;
      this.#record(target, { allowed: true, address, reason, bytesOut, bytesIn });
    };
    // Not a registry error: the client of the egress proxy gets it as its 502 text.
    upstream.setTimeout(CONNECT_TIMEOUT_MS, () => upstream.destroy(new Error('connect timed out')));
    upstream.on('error', (err) => {
      if (!connected)
        answer(client, '502 Bad Gateway', `exec-server egress: ${target.host}:${target.port}: ${err.message}`);
      else client.destroy();
      end(err.message);
    });
    upstream.once('connect', () => {
      connected = true;
      upstream.setTimeout(0);
      const toUpstream = [...(target.head ? [target.head] : []), ...(rest.length > 0 ? [rest] : [])];
      const toClient = target.head ? [] : [Buffer.from('HTTP/1.1 200 Connection Established\r\n\r\n')];
      if (this.#o.native !== false && canRelayNatively(client, upstream)) {
        void this.#handOver(client, upstream, toUpstream, toClient, end, (o, i) => {
          bytesOut += o;
          bytesIn += i;
        });
        return;
      }
      plainTunnel(client);
      for (const b of toUpstream) upstream.write(b);
      for (const b of toClient) client.write(b);
      bytesOut = toUpstream.reduce((n, b) => n + b.length, 0);
      this.counts.bytesOut += bytesOut;
      client.on('data', (d: Buffer) => {
        bytesOut += d.length;
        this.counts.bytesOut += d.length;
      });
      upstream.on('data', (d: Buffer) => {
        bytesIn += d.length;
        this.counts.bytesIn += d.length;
      });
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    });
    upstream.once('close', () => {
      if (connected) client.end();
      end();
    });
    client.once('close', () => upstream.destroy());
  }

  /**
   * The native relay takes both sockets (native-relay.ts); counted as it reports (a long
   * connection as it goes), recorded when it ends, or when the relay process died under it.
   */
  async #handOver(
    client: Duplex,
    upstream: Socket,
    toUpstream: Buffer[],
    toClient: Buffer[],
    end: (reason?: string) => void,
    add: (out: number, inBytes: number) => void,
  ): Promise<void> {
    const seen: Moved = { out: 0, in: 0 };
    // The relay reports totals: each report counts what it adds.
    const count = (m: Moved): void => {
      const o = Math.max(0, m.out - seen.out);
      const i = Math.max(0, m.in - seen.in);
      seen.out += o;
      seen.in += i;
      add(o, i);
      this.counts.bytesOut += o;
      this.counts.bytesIn += i;
    };
    try {
      const relay = await this.#native.relay(client, upstream, toUpstream, toClient, count);
      this.#open.delete(client);
      if (relay.took) this.counts.tookSocket++;
      // (after relay(): it adds what the client had already sent)
      const first = toUpstream.reduce((n, b) => n + b.length, 0);
      add(first, 0);
      this.counts.bytesOut += first;
      const moved = await relay.done;
      count(moved);
      end(moved.died);
    } catch (err) {
      client.destroy();
      upstream.destroy();
      end((err as Error).message);
    }
  }

  /** A connection answered before its destination was known: counted and recorded as refused. */
  #refuseEarly(client: Duplex, status: string, why: string): void {
    this.counts.refused++;
    this.#record(undefined, { allowed: false, reason: why, bytesOut: 0, bytesIn: 0 });
    answer(client, status, `exec-server egress: ${why}`);
  }

  #record(target: Target | undefined, r: Omit<EgressRecord, 'host' | 'port' | 'method'>): void {
    const where = { host: target?.host ?? null, port: target?.port ?? null, method: target?.method ?? null };
    this.#o.onRecord?.({ ...where, ...r });
  }
}
