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
 */
import { lookup } from 'node:dns/promises';
import { connect, isIP, type Socket } from 'node:net';
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

/** Largest request head (request line and headers) the proxy reads. */
const MAX_HEAD_BYTES = 16 * 1024;
const HEAD_TIMEOUT_MS = 30_000;
const LOOKUP_TIMEOUT_MS = 5_000;
const CONNECT_TIMEOUT_MS = 10_000;
/** Request headers that concern this hop only (RFC 9110 7.6.1), dropped before forwarding. */
const HOP_HEADERS = new Set(['connection', 'proxy-connection', 'keep-alive', 'proxy-authorization', 'te', 'upgrade']);

/** One connection as it ended, for the audit log and the counters. */
export interface EgressRecord {
  readonly host: string;
  readonly port: number;
  readonly method: string;
  readonly allowed: boolean;
  readonly address?: string | undefined;
  readonly reason?: string | undefined;
  /** Session → destination, and back. */
  readonly bytesOut: number;
  readonly bytesIn: number;
}

export interface EgressCounts {
  connections: number;
  refused: number;
  active: number;
  bytesOut: number;
  bytesIn: number;
  /** Connections whose client socket the native relay took from the agent (tests, benchmarks). */
  tookSocket: number;
}

export interface EgressProxyOptions {
  readonly allow: readonly AllowEntry[];
  /** Connections relayed at once; further ones are answered 429. */
  readonly maxConnections: number;
  /** Called once per connection when it ends (or is refused). */
  readonly onRecord?: ((r: EgressRecord) => void) | undefined;
  /** false: relay in JavaScript even where the native relay could take over (tests, benchmarks). */
  readonly native?: boolean | undefined;
  /** The resolver (tests); default: the system's (`getaddrinfo`). */
  readonly resolve?: ((host: string) => Promise<string[]>) | undefined;
  /** The native relay process ended unasked or under open connections (each is recorded too). */
  readonly onRelayExit?: ((e: RelayExit) => void) | undefined;
}

interface Target {
  readonly method: string;
  readonly host: string;
  readonly port: number;
  /** What goes to the destination first (a rewritten request head), or nothing for CONNECT. */
  readonly head?: Buffer | undefined;
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
}

/** `host:port` of a CONNECT target or URL authority (IPv6 in brackets); undefined if malformed. */
export function splitAuthority(
  authority: string,
  defaultPort: number | undefined,
): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]/\s]+))(?::(\d{1,5}))?$/.exec(authority);
  if (!m) return undefined;
  const host = (m[1] ?? m[2] ?? '').toLowerCase();
  const port = m[3] !== undefined ? Number(m[3]) : defaultPort;
  if (host === '' || port === undefined || port < 1 || port > 65535) return undefined;
  return { host, port };
}

/** The destination of a request head, with the head to forward; a string says why it is malformed. */
export function parseRequestHead(head: string): Target | string {
  const lines = head.split('\r\n');
  const [method = '', target = '', version = ''] = (lines[0] ?? '').split(' ');
  if (!/^HTTP\/1\.[01]$/.test(version) || method === '') return 'not an HTTP/1.x request';
  if (method === 'CONNECT') {
    const a = splitAuthority(target, undefined);
    return a ? { method, ...a } : `CONNECT target ${target} is not host:port`;
  }
  const url = /^http:\/\/([^/?#]+)([^#]*)$/i.exec(target);
  if (!url) return `${target} is not an absolute http:// URL (use CONNECT for https)`;
  const a = splitAuthority(url[1] ?? '', 80);
  if (!a) return `${url[1]} is not host[:port]`;
  const headers = lines
    .slice(1)
    .filter((l) => l !== '' && !HOP_HEADERS.has(l.slice(0, l.indexOf(':')).trim().toLowerCase()));
  if (!headers.some((l) => /^host\s*:/i.test(l))) headers.unshift(`Host: ${url[1]}`);
  const path = url[2] === '' || url[2] === undefined ? '/' : url[2].startsWith('/') ? url[2] : `/${url[2]}`;
  const out = `${method} ${path} ${version}\r\n${headers.join('\r\n')}\r\nConnection: close\r\n\r\n`;
  return { method, ...a, head: Buffer.from(out, 'latin1') };
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

  #readHead(client: Duplex): Promise<{ head: string; rest: Buffer } | undefined> {
    return new Promise((resolve) => {
      let buf = Buffer.alloc(0);
      const finish = (v: { head: string; rest: Buffer } | undefined, status?: string, why?: string): void => {
        clearTimeout(timer);
        client.off('data', onData);
        client.off('end', onEnd);
        if (status !== undefined) answer(client, status, why ?? '');
        resolve(v);
      };
      const timer = setTimeout(() => finish(undefined, '408 Request Timeout', 'no request in time'), HEAD_TIMEOUT_MS);
      const onData = (d: Buffer): void => {
        buf = Buffer.concat([buf, d]);
        const end = buf.indexOf('\r\n\r\n');
        if (end >= 0) {
          client.pause();
          finish({ head: buf.subarray(0, end + 2).toString('latin1'), rest: buf.subarray(end + 4) });
        } else if (buf.length > MAX_HEAD_BYTES)
          finish(undefined, '431 Request Header Fields Too Large', 'request head too large');
      };
      const onEnd = (): void => {
        finish(undefined);
        client.destroy();
      };
      client.on('data', onData);
      client.once('end', onEnd);
      client.resume();
    });
  }

  async #serve(client: Duplex, head: string, rest: Buffer): Promise<void> {
    const target = parseRequestHead(head);
    if (typeof target === 'string') {
      answer(client, '400 Bad Request', target);
      return;
    }
    const refuse = (reason: string): void => {
      this.counts.refused++;
      this.#record(target, { allowed: false, reason, bytesOut: 0, bytesIn: 0 });
      answer(client, '403 Forbidden', `exec-server egress: refused: ${reason}`);
    };
    if (this.counts.active >= this.#o.maxConnections) {
      answer(client, '429 Too Many Requests', `exec-server egress: ${this.#o.maxConnections} connections already open`);
      return;
    }
    if (isIP(target.host) === 0 && !mayAllowName(this.#o.allow, target.host, target.port))
      return refuse(`${target.host}:${target.port} is not in the session's allow-list`);
    let addresses: string[];
    try {
      addresses = isIP(target.host) !== 0 ? [target.host] : await (this.#o.resolve ?? systemResolve)(target.host);
    } catch (err) {
      answer(client, '502 Bad Gateway', `exec-server egress: cannot resolve ${target.host}: ${(err as Error).message}`);
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

  #record(target: Target, r: Omit<EgressRecord, 'host' | 'port' | 'method'>): void {
    this.#o.onRecord?.({ host: target.host, port: target.port, method: target.method, ...r });
  }
}
