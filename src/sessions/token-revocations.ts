/**
 * What a session keeps of its session tokens (src/transport/session-tokens.ts): only the ones it
 * revoked, since the tokens verify themselves. Stored with the session's record.
 */
import { execError } from '../errors.ts';

/**
 * Unexpired revocations one session keeps at most. Minting is free (tokens are not stored), and
 * every revocation stays until its token would have expired and is written with the session's
 * record: without a bound a tenant could grow both for as long as that.
 */
export const MAX_TOKEN_REVOCATIONS = 10_000;

/**
 * The session tokens a session revoked before their expiry (`DELETE .../tokens/{tokenId}`).
 * Entries go once their token would have expired anyway, and there are at most
 * `MAX_TOKEN_REVOCATIONS` of them.
 */
export class TokenRevocations {
  readonly #revoked = new Map<string, number>();
  readonly #listeners = new Set<(tokenId: string) => void>();

  /** Throws `EXEC_ERR_TOKEN_LIMIT` when the session keeps as many unexpired revocations as it may. */
  revoke(tokenId: string, expiresAt: number, nowSeconds = Math.floor(Date.now() / 1000)): void {
    if (!this.#revoked.has(tokenId) && this.#revoked.size >= MAX_TOKEN_REVOCATIONS) {
      this.#prune(nowSeconds);
      if (this.#revoked.size >= MAX_TOKEN_REVOCATIONS)
        throw execError(
          'EXEC_ERR_TOKEN_LIMIT',
          `this session keeps at most ${MAX_TOKEN_REVOCATIONS} revoked tokens until they expire; delete the session to revoke all its tokens`,
          { detail: { limit: MAX_TOKEN_REVOCATIONS } },
        );
    }
    this.#revoked.set(tokenId, expiresAt);
    for (const listener of this.#listeners) listener(tokenId);
  }

  has(tokenId: string): boolean {
    return this.#revoked.has(tokenId);
  }

  /** Called with each revoked id (live connections of that token close). */
  onRevoke(listener: (tokenId: string) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Unexpired entries, for the session's record. */
  entries(nowSeconds = Math.floor(Date.now() / 1000)): Array<[string, number]> {
    this.#prune(nowSeconds);
    return [...this.#revoked];
  }

  #prune(nowSeconds: number): void {
    for (const [id, exp] of this.#revoked) if (exp <= nowSeconds) this.#revoked.delete(id);
  }

  /** Entries read back from a recovered session's record. */
  restore(entries: ReadonlyArray<readonly [string, number]>): void {
    for (const [id, exp] of entries) this.#revoked.set(id, exp);
  }
}
