/**
 * Tokens scoped to one session. A token is self-verifying so that it works on every replica
 * that shares the key and after a restart, without a shared token store:
 * `est1.PAYLOAD.MAC`, PAYLOAD = base64url JSON `{t: tenant, s: session, a: access, i: tokenId,
 * e: expiresAt (seconds)}`, MAC = HMAC-SHA256 over `est1.PAYLOAD` with the session-token key
 * (src/hmac-key.ts). Revocation is the one piece of state: the ids revoked before their expiry,
 * kept by the session itself (`TokenRevocations`, src/sessions/token-revocations.ts) and stored
 * with the session's record, so it survives exactly as long as the session does
 * (docs/architecture.md, "Session tokens").
 */
import { randomBytes } from 'node:crypto';
import { execError, type ExecServerError } from '../errors.ts';
import { asTenantId, type TenantId } from '../ids.ts';
import { HmacKey } from '../hmac-key.ts';
import type { SessionToken, TokenAccess } from '../protocol/index.ts';
import type { TokenScope } from '../sessions/token-scope.ts';

const PREFIX = 'est1.';
const TOKEN = /^est1\.([A-Za-z0-9_-]{1,1024})\.([A-Za-z0-9_-]{43})$/;

/** Default validity of a session token when the request names none. */
export const DEFAULT_TOKEN_TTL_SECONDS = 3600;

/** True for a bearer that claims to be a session token (it is then never tried as a tenant token). */
export function isSessionToken(bearer: string): boolean {
  return bearer.startsWith(PREFIX);
}

/** Mints and verifies session tokens (`est1.PAYLOAD.MAC`) with no store (docs/architecture.md, "Session tokens"). */
export class SessionTokenSigner {
  readonly #key: HmacKey;

  /** `secret`: `--session-token-secret`, else the digest of the tenant tokens, else random per process. */
  constructor(secret: string | undefined) {
    this.#key = new HmacKey('exec-server session token', secret);
  }

  /** False when the key is random: tokens then end with this process. */
  get stable(): boolean {
    return this.#key.stable;
  }

  issue(tenant: TenantId, sessionId: string, access: TokenAccess, ttlSeconds: number, now = Date.now()): SessionToken {
    const nonce = randomBytes(9).toString('base64url');
    const tokenId = `tok_${nonce}${this.#idTag(sessionId, nonce)}`;
    const expiresAt = Math.floor(now / 1000) + ttlSeconds;
    const payload = Buffer.from(
      JSON.stringify({ t: tenant, s: sessionId, a: access, i: tokenId, e: expiresAt }),
    ).toString('base64url');
    const mac = this.#key.mac(`${PREFIX}${payload}`).toString('base64url');
    return {
      token: `${PREFIX}${payload}.${mac}`,
      tokenId,
      access,
      expiresAt: new Date(expiresAt * 1000).toISOString(),
    };
  }

  /**
   * A token id carries a tag of the session it was issued for, so that a revocation can tell
   * an id of this session from a mistaken or made-up one without a store of issued tokens.
   */
  #idTag(sessionId: string, nonce: string): string {
    return this.#key.mac(`token id\u0000${sessionId}\u0000${nonce}`).subarray(0, 6).toString('base64url');
  }

  /** Whether `tokenId` is the id of a token this key issued for `sessionId`. */
  issuedFor(tokenId: string, sessionId: string): boolean {
    const m = /^tok_([A-Za-z0-9_-]{12})([A-Za-z0-9_-]{8})$/.exec(tokenId);
    return m?.[1] !== undefined && m[2] === this.#idTag(sessionId, m[1]);
  }

  /** The scope of a genuine, unexpired token; else the error to answer (401). Revocation is the caller's. */
  verify(token: string, nowMs = Date.now()): TokenScope | ExecServerError {
    const m = TOKEN.exec(token);
    if (
      !m ||
      m[1] === undefined ||
      m[2] === undefined ||
      // The last of 43 characters carries 2 spare bits: only the canonical spelling is the MAC.
      Buffer.from(m[2], 'base64url').toString('base64url') !== m[2] ||
      !this.#key.check(`${PREFIX}${m[1]}`, Buffer.from(m[2], 'base64url'))
    )
      return execError('EXEC_ERR_UNAUTHORIZED', 'invalid session token');
    let claims: { t?: unknown; s?: unknown; a?: unknown; i?: unknown; e?: unknown };
    try {
      claims = JSON.parse(Buffer.from(m[1], 'base64url').toString('utf8')) as typeof claims;
    } catch {
      return execError('EXEC_ERR_UNAUTHORIZED', 'invalid session token');
    }
    const { t, s, a, i, e } = claims;
    if (typeof t !== 'string' || typeof s !== 'string' || (a !== 'full' && a !== 'read'))
      return execError('EXEC_ERR_UNAUTHORIZED', 'invalid session token');
    if (typeof i !== 'string' || typeof e !== 'number')
      return execError('EXEC_ERR_UNAUTHORIZED', 'invalid session token');
    if (e * 1000 <= nowMs)
      return execError('EXEC_ERR_TOKEN_EXPIRED', `session token ${i} expired at ${new Date(e * 1000).toISOString()}`, {
        detail: { tokenId: i },
      });
    return { tenant: asTenantId(t), sessionId: s, access: a, tokenId: i, expiresAt: e };
  }
}
