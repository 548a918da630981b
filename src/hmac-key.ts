/**
 * The server's one HMAC keying: `HmacKey` keys an HMAC-SHA256 for one purpose, derived from a
 * secret that is the same on every replica (else random per process), and checks MACs in
 * constant time. Its users: signed preview URLs (src/preview/signing.ts) and tokens scoped to
 * one session (src/transport/session-tokens.ts), each under a purpose of its own, so the two
 * kinds never verify as each other.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** An HMAC-SHA256 key for one purpose: the same secret gives unrelated keys for different purposes. */
export class HmacKey {
  readonly #key: Buffer;
  /** False when the key is random (its MACs do not outlive this process nor reach other replicas). */
  readonly stable: boolean;

  constructor(purpose: string, secret: string | undefined) {
    this.stable = secret !== undefined;
    this.#key = secret === undefined ? randomBytes(32) : createHash('sha256').update(`${purpose}\0${secret}`).digest();
  }

  mac(text: string): Buffer {
    return createHmac('sha256', this.#key).update(text).digest();
  }

  /** True when `presented` is the MAC of `text` (constant time). */
  check(text: string, presented: Buffer): boolean {
    const expected = this.mac(text);
    return presented.length === expected.length && timingSafeEqual(presented, expected);
  }
}
