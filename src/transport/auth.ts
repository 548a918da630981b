/**
 * Bearer-token authentication: tokens map to tenants. Tokens are compared in constant time
 * (hashed first so lengths do not leak) and every configured token is checked, so the time
 * taken does not depend on which one matched.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ConfigError, type Config } from '../config.ts';
import { asTenantId, type TenantId } from '../ids.ts';

/** The tenant of `--token`, and of every caller when no token is configured. */
export const DEFAULT_TENANT = asTenantId('default');

/** The tenant tokens' check: which tenant a bearer token names. */
export interface Authenticator {
  /** False when no token is configured (loopback development). */
  readonly enabled: boolean;
  /** The tenant of an `Authorization` header, or undefined when it is missing or wrong. */
  authenticate(header: string | undefined): TenantId | undefined;
  /**
   * A digest of every configured tenant token (undefined without any): the default key of
   * session tokens, so replicas and restarts configured with the same tokens verify each
   * other's session tokens without another secret to distribute.
   */
  readonly tokensDigest: string | undefined;
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

function parseTokenList(text: string, where: string): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (const raw of text.split(/[,\n]/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const i = line.indexOf(':');
    const tenant = line.slice(0, i).trim();
    const token = line.slice(i + 1).trim();
    if (i <= 0 || token === '' || !/^[A-Za-z0-9_.-]{1,64}$/.test(tenant))
      throw new ConfigError(
        `${where}: expected tenant:token entries (tenant of letters, digits, _ . -), got an entry without one`,
      );
    pairs.push([tenant, token]);
  }
  return pairs;
}

/** The authenticator of the configured tenant tokens (`--token`, `--tokens`, `--tokens-file`). */
export function createAuthenticator(config: Config): Authenticator {
  const pairs: Array<[string, string]> = [];
  if (config.token !== undefined) pairs.push([DEFAULT_TENANT, config.token]);
  if (config.tokens !== undefined) pairs.push(...parseTokenList(config.tokens, '--tokens / EXEC_SERVER_TOKENS'));
  if (config.tokensFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(config.tokensFile, 'utf8');
    } catch (err) {
      throw new ConfigError(`--tokens-file: cannot read ${config.tokensFile}: ${(err as Error).message}`);
    }
    pairs.push(...parseTokenList(text, `--tokens-file ${config.tokensFile}`));
  }
  const seen = new Set<string>();
  for (const [, token] of pairs) {
    if (seen.has(token)) throw new ConfigError('the same token is configured twice; each tenant needs its own token');
    seen.add(token);
  }
  const table = pairs.map(([tenant, token]) => ({ tenant: asTenantId(tenant), hash: digest(token) }));
  const sorted = pairs.map(([tenant, token]) => `${tenant}:${token}`).sort();
  return {
    enabled: table.length > 0,
    tokensDigest: sorted.length === 0 ? undefined : createHash('sha256').update(sorted.join('\n')).digest('hex'),
    authenticate(header) {
      if (table.length === 0) return DEFAULT_TENANT;
      const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
      if (!m || m[1] === undefined) return undefined;
      const presented = digest(m[1].trim());
      let match: TenantId | undefined;
      for (const entry of table) if (timingSafeEqual(entry.hash, presented)) match = entry.tenant;
      return match;
    },
  };
}
