/**
 * The caller's address as the audit log names it (`remote`). Behind a fleet's forwarding the
 * owner sees the forwarding replica's address, not the client's, so a replica that forwards a
 * request (HTTP, a relayed WebSocket, an MCP tool call, a preview request) stamps the client's
 * address into `x-exec-server-client`: the address, the time and an HMAC under a key every
 * replica shares (the session tokens' secret, else the tenant tokens' digest, under a purpose of
 * its own). The owner takes the stamp's address when the MAC holds and the stamp is recent;
 * otherwise, or when a client sends the header itself, the connection's own address counts.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { HmacKey } from '../hmac-key.ts';

declare module 'fastify' {
  interface FastifyInstance {
    clientStamp: ClientStamp;
  }
  interface FastifyRequest {
    /** The client's address: the connection's, or the one a replica of this fleet vouched for. */
    clientAddress: string;
  }
}

/** The header a forwarding replica sets. */
export const CLIENT_HEADER = 'x-exec-server-client';
/** How old a stamp may be (a forwarded request is sent at once; clocks of replicas differ a little). */
const STAMP_MAX_AGE_S = 60;

/** Stamps and checks the client address a forwarding replica vouches for (`x-exec-server-client`). */
export class ClientStamp {
  readonly #key: HmacKey;

  constructor(secret: string | undefined) {
    this.#key = new HmacKey('exec-server forwarded client', secret);
  }

  /** The header's value for a request from `address`, now. */
  stamp(address: string, nowSeconds = Math.floor(Date.now() / 1000)): string {
    const text = `${address};${nowSeconds}`;
    return `${text};${this.#key.mac(text).toString('base64url')}`;
  }

  /** The address a stamp vouches for, when its MAC holds and it is recent; else undefined. */
  read(value: string | string[] | undefined, nowSeconds = Math.floor(Date.now() / 1000)): string | undefined {
    if (typeof value !== 'string' || value.length > 256) return undefined;
    const m = /^([0-9A-Fa-f.:]{2,64});(\d{1,12});([A-Za-z0-9_-]{43})$/.exec(value);
    if (!m || m[1] === undefined || m[2] === undefined || m[3] === undefined) return undefined;
    const at = Number(m[2]);
    if (Math.abs(nowSeconds - at) > STAMP_MAX_AGE_S) return undefined;
    return this.#key.check(`${m[1]};${m[2]}`, Buffer.from(m[3], 'base64url')) ? m[1] : undefined;
  }
}

/** The header's value a forwarding replica sends for `request` (its client's address, now). */
export function clientStampFor(request: FastifyRequest): string {
  return request.server.clientStamp.stamp(request.clientAddress);
}

/**
 * Sets `request.clientAddress` on every request, first of all hooks (the audit's actor reads it).
 * A lone server (no `--fleet`) takes no stamp: no replica vouches for anyone there, and its key
 * may derive from one tenant token alone, which that token's holder can compute.
 */
export function registerClientAddress(app: FastifyInstance, stamp: ClientStamp): void {
  app.decorate('clientStamp', stamp);
  app.decorateRequest('clientAddress', '');
  // The server's sessions tell a lone server; the hook on an app of its own reads stamps.
  const lone = app.hasDecorator('sessions') && app.sessions.backend.fleet === undefined;
  app.addHook('onRequest', async (request) => {
    request.clientAddress = (lone ? undefined : stamp.read(request.headers[CLIENT_HEADER])) ?? request.ip;
  });
}
