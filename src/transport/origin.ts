/**
 * The one `Origin` rule of the server, applied by the app's `onRequest` hook to every WebSocket
 * upgrade (JSON-RPC, preview ports) and every request but a preview application's own (the API,
 * `/mcp`): a request passes when it carries no `Origin` (non-browser clients never send one),
 * when its `Origin` is the server's own (the console, compared with the scheme and `Host` the
 * request came to), or when the operator listed it in `--allowed-origins`. Anything else, `null`
 * included (a sandboxed frame or a `file:` page), is refused: browsers let any page open a
 * WebSocket to any address and send it simple requests, and a tokenless server on loopback
 * would otherwise run commands for any web page its user visits.
 *
 * Without tokens the `Host` is trusted to name the server only when no web page can choose it:
 * an IP address, `localhost` (and `*.localhost`), or a name under `--preview-host`. A page of
 * another site can re-point its own name at the server (DNS rebinding) and then sends that
 * name as both `Host` and `Origin`; with tokens such a page still has no token.
 */
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { allowedOriginList } from '../config.ts';

/** `scheme://host` of the request as the client addressed it (behind a proxy: X-Forwarded-Proto). */
export function originOf(raw: IncomingMessage): string | undefined {
  const host = raw.headers.host;
  if (host === undefined || !/^[A-Za-z0-9.:[\]-]{1,300}$/.test(host)) return undefined;
  const forwarded = String(raw.headers['x-forwarded-proto'] ?? '')
    .split(',')[0]
    ?.trim()
    .toLowerCase();
  const scheme =
    forwarded === 'https' || forwarded === 'http'
      ? forwarded
      : (raw.socket as { encrypted?: boolean }).encrypted
        ? 'https'
        : 'http';
  return `${scheme}://${host.toLowerCase()}`;
}

/** An origin in its serialized form (`scheme://host[:port]`, default port dropped, lower case), or undefined. */
function normalize(origin: string): string | undefined {
  try {
    const url = new URL(origin);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
    return url.origin;
  } catch {
    return undefined;
  }
}

/** The host name of a `Host` header (lower case, without its port or the brackets of IPv6). */
function hostName(host: string): string {
  const name = host.toLowerCase().replace(/:\d*$/, '');
  return name.startsWith('[') && name.endsWith(']') ? name.slice(1, -1) : name;
}

/** Whether a host name is one no other site can make a browser send (see the module comment). */
function unforgeableHost(name: string, previewHost: string | undefined): boolean {
  return (
    isIP(name) !== 0 ||
    name === 'localhost' ||
    name.endsWith('.localhost') ||
    (previewHost !== undefined && name.endsWith(`.${previewHost.toLowerCase()}`))
  );
}

/** What the `Origin` rule allows beyond the server's own origin. */
export interface OriginCheckOptions {
  /** `--allowed-origins`. */
  readonly allowedOrigins?: string | undefined;
  /** Whether the server requires tokens (then any `Host` may name the server's own origin). */
  readonly tokens: boolean;
  /** `--preview-host`: its names are the operator's, never a rebound site's. */
  readonly previewHost?: string | undefined;
}

/** Decides whether a request's `Origin` may drive this server. */
export class OriginCheck {
  readonly #allowed: ReadonlySet<string>;
  readonly #tokens: boolean;
  readonly #previewHost: string | undefined;

  constructor(opts: OriginCheckOptions) {
    this.#allowed = allowedOriginList(opts.allowedOrigins);
    this.#tokens = opts.tokens;
    this.#previewHost = opts.previewHost;
  }

  /** True when the request may proceed (no Origin, its own origin, or an allowed one). */
  allows(raw: IncomingMessage): boolean {
    const header = raw.headers.origin;
    if (header === undefined) return true;
    const origin = normalize(header);
    if (origin === undefined) return false;
    const own = originOf(raw);
    const trusted = this.#tokens || unforgeableHost(hostName(raw.headers.host ?? ''), this.#previewHost);
    if (own !== undefined && trusted && normalize(own) === origin) return true;
    return this.#allowed.has(origin);
  }
}

/** What a refused request is told (the same words on every route). */
export function foreignOriginMessage(raw: IncomingMessage): string {
  return `requests from origin ${JSON.stringify(String(raw.headers.origin).slice(0, 200))} are refused; a browser page of another origin may not drive this server (an operator may list origins in --allowed-origins)`;
}
