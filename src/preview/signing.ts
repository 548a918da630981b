/**
 * Signed preview URLs: a token that opens one exposed port of one session until it expires,
 * without the tenant's bearer token (a browser cannot send one). The token is
 * `EXPIRY.TENANT.MAC` (tenant base64url) with MAC = HMAC-SHA256(key, "TENANT:SESSION:PORT:EXPIRY"),
 * base64url; checked in constant time. It names its tenant so the session is looked up as that
 * tenant's, like with a bearer token. The key is `--preview-secret` (the same on every replica)
 * or random per process.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { asTenantId, type TenantId } from '../ids.ts';

export class PreviewSigner {
  readonly #key: Buffer;

  constructor(secret: string | undefined) {
    this.#key =
      secret === undefined ? randomBytes(32) : createHash('sha256').update(`exec-server preview\0${secret}`).digest();
  }

  #mac(tenant: string, sessionId: string, port: number, expiresAt: number): Buffer {
    return createHmac('sha256', this.#key).update(`${tenant}:${sessionId}:${port}:${expiresAt}`).digest();
  }

  /** A token of `tenant` for `port` of `sessionId`, valid until `expiresAt` (seconds since the epoch). */
  sign(tenant: string, sessionId: string, port: number, expiresAt: number): string {
    return `${expiresAt}.${Buffer.from(tenant).toString('base64url')}.${this.#mac(tenant, sessionId, port, expiresAt).toString('base64url')}`;
  }

  /** The tenant `token` was signed for, when it opens `port` of `sessionId` at `nowSeconds`; else undefined. */
  verify(
    sessionId: string,
    port: number,
    token: string,
    nowSeconds = Math.floor(Date.now() / 1000),
  ): TenantId | undefined {
    const m = /^(\d{1,12})\.([A-Za-z0-9_-]{1,128})\.([A-Za-z0-9_-]{43})$/.exec(token);
    if (!m || m[1] === undefined || m[2] === undefined || m[3] === undefined) return undefined;
    const expiresAt = Number(m[1]);
    const tenant = Buffer.from(m[2], 'base64url').toString('utf8');
    const presented = Buffer.from(m[3], 'base64url');
    const expected = this.#mac(tenant, sessionId, port, expiresAt);
    if (presented.length !== expected.length || !timingSafeEqual(presented, expected) || expiresAt <= nowSeconds)
      return undefined;
    return asTenantId(tenant);
  }
}
