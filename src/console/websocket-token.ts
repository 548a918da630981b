/**
 * Bearer tokens for browser WebSockets. A browser cannot set `Authorization` on a WebSocket
 * upgrade, and a token in the URL would end up in logs and history; so the console offers two
 * subprotocols, `exec-server` and `exec-server.bearer.<base64url token>`. The server reads the
 * token from the second and answers with the first, so the token is never echoed back.
 */

/** The subprotocol the server selects for a browser connection. */
export const WS_PROTOCOL = 'exec-server';
const BEARER_PREFIX = 'exec-server.bearer.';
/** base64url of the longest token we accept (tokens are configured secrets, never this long). */
const MAX_ENCODED = 4096;

/** `Bearer <token>` from a `Sec-WebSocket-Protocol` header, or undefined when it carries none. */
export function bearerFromProtocols(header: string | string[] | undefined): string | undefined {
  const value = Array.isArray(header) ? header.join(',') : header;
  if (value === undefined || value.length > MAX_ENCODED + 256) return undefined;
  for (const raw of value.split(',')) {
    const protocol = raw.trim();
    if (!protocol.startsWith(BEARER_PREFIX)) continue;
    const encoded = protocol.slice(BEARER_PREFIX.length);
    if (encoded === '' || !/^[A-Za-z0-9_-]+$/.test(encoded)) return undefined;
    return `Bearer ${Buffer.from(encoded, 'base64url').toString('utf8')}`;
  }
  return undefined;
}

/**
 * Why an upgrade cannot work when it offers bearer subprotocols only: the server never selects
 * one (that would echo the token), so it would answer with no subprotocol, which a client that
 * asked for one refuses with no word of why. Undefined when something else is offered too.
 */
export function bearerOnlyProblem(header: string | string[] | undefined): string | undefined {
  const value = Array.isArray(header) ? header.join(',') : (header ?? '');
  const offered = value
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  if (offered.length === 0 || !offered.every((p) => p.startsWith(BEARER_PREFIX))) return undefined;
  return `a WebSocket that offers ${BEARER_PREFIX}<token> must offer the subprotocol ${WS_PROTOCOL} too: the server selects that one and never echoes the token`;
}

/**
 * ws's `handleProtocols`: `exec-server` when offered; otherwise what ws does without the hook
 * (the first offered), never a bearer entry.
 */
export function selectProtocol(protocols: Set<string>): string | false {
  if (protocols.has(WS_PROTOCOL)) return WS_PROTOCOL;
  for (const p of protocols) if (!p.startsWith(BEARER_PREFIX)) return p;
  return false;
}
