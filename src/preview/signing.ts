/**
 * Signed preview URLs (`PreviewSigner`): a token that opens one exposed port of one session
 * until it expires, without the tenant's bearer token (a browser cannot send one). The token is
 * `EXPIRY.TENANT.MAC` (tenant base64url) with MAC = HMAC-SHA256(key, "TENANT:SESSION:PORT:EXPIRY"),
 * base64url. It names its tenant so the session is looked up as that tenant's, like with a
 * bearer token. The key (`HmacKey`, src/hmac-key.ts) is `--preview-secret`, else derived from
 * the tenant tokens (as the session tokens' is), else random per process. A URL made for a
 * session token (src/transport/session-tokens.ts) names that token too, `EXPIRY.TENANT.TOKENID.MAC`
 * with `:TOKENID` at the end of the signed text, so that the proxy can end it with the token.
 */
import { HmacKey } from '../hmac-key.ts';
import { asTenantId, type TenantId } from '../ids.ts';

/** `EXPIRY.TENANT[.TOKENID].MAC`: a session token's id is `tok_` and 20 base64url characters. */
const SIGNED = /^(\d{1,12})\.([A-Za-z0-9_-]{1,128})\.(?:(tok_[A-Za-z0-9_-]{20})\.)?([A-Za-z0-9_-]{43})$/;

/** Signs and checks the preview paths that open a port without a token, until they expire. */
export class PreviewSigner {
  readonly #key: HmacKey;

  constructor(secret: string | undefined) {
    this.#key = new HmacKey('exec-server preview', secret);
  }

  #text(tenant: string, sessionId: string, port: number, expiresAt: number, tokenId: string | undefined): string {
    return `${tenant}:${sessionId}:${port}:${expiresAt}${tokenId === undefined ? '' : `:${tokenId}`}`;
  }

  /**
   * A token of `tenant` for `port` of `sessionId`, valid until `expiresAt` (seconds since the
   * epoch); `tokenId`: made for that session token, which the proxy then checks is not revoked.
   */
  sign(tenant: string, sessionId: string, port: number, expiresAt: number, tokenId?: string): string {
    const mac = this.#key.mac(this.#text(tenant, sessionId, port, expiresAt, tokenId));
    const bound = tokenId === undefined ? '' : `${tokenId}.`;
    return `${expiresAt}.${Buffer.from(tenant).toString('base64url')}.${bound}${mac.toString('base64url')}`;
  }

  /** The session token a signed token was made for (trust it only once `verify` accepted the token). */
  static tokenIdOf(token: string): string | undefined {
    return SIGNED.exec(token)?.[3];
  }

  /** The tenant `token` was signed for, when it opens `port` of `sessionId` at `nowSeconds`; else undefined. */
  verify(
    sessionId: string,
    port: number,
    token: string,
    nowSeconds = Math.floor(Date.now() / 1000),
  ): TenantId | undefined {
    const m = SIGNED.exec(token);
    if (!m || m[1] === undefined || m[2] === undefined || m[4] === undefined) return undefined;
    const expiresAt = Number(m[1]);
    const tenant = Buffer.from(m[2], 'base64url').toString('utf8');
    const presented = Buffer.from(m[4], 'base64url');
    if (!this.#key.check(this.#text(tenant, sessionId, port, expiresAt, m[3]), presented) || expiresAt <= nowSeconds)
      return undefined;
    return asTenantId(tenant);
  }
}
