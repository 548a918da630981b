/**
 * What a session keeps of its session tokens (src/transport/session-tokens.ts): only the ones it
 * revoked, since the tokens verify themselves. Stored with the session's record.
 */
/**
 * The session tokens a session revoked before their expiry (`DELETE .../tokens/{tokenId}`).
 * Entries go once their token would have expired anyway, so the list stays small.
 */
export class TokenRevocations {
  readonly #revoked = new Map<string, number>();
  readonly #listeners = new Set<(tokenId: string) => void>();

  revoke(tokenId: string, expiresAt: number): void {
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
    for (const [id, exp] of this.#revoked) if (exp <= nowSeconds) this.#revoked.delete(id);
    return [...this.#revoked];
  }

  /** Entries read back from a recovered session's record. */
  restore(entries: ReadonlyArray<readonly [string, number]>): void {
    for (const [id, exp] of entries) this.#revoked.set(id, exp);
  }
}
