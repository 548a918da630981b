/**
 * The request head a command sends its egress proxy (proxy.ts; docs/architecture.md, "Egress"):
 * where it ends, and what it asks for. Lines may end in CRLF or a bare LF (RFC 9112 §2.2 lets a
 * recipient accept both; curl, wget and every HTTP library send CRLF, so a bare LF comes from
 * hand-written clients, which would otherwise wait for the head deadline). A head that could be
 * read two ways by the destination is refused (400) rather than forwarded: a bare CR, a folded
 * line (RFC 9112 §5.2), a field name with spaces before its colon (§5.1).
 */

/** Largest request head (request line, fields and the empty line) the proxy reads. */
export const MAX_HEAD_BYTES = 16 * 1024;
/** Request fields that concern this hop only (RFC 9110 7.6.1), dropped before forwarding. */
const HOP_HEADERS = new Set(['connection', 'proxy-connection', 'keep-alive', 'proxy-authorization', 'te', 'upgrade']);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const FIELD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:/;

/** What a request head asks the proxy for. */
export interface Target {
  readonly method: string;
  readonly host: string;
  readonly port: number;
  /** What goes to the destination first (a rewritten request head), or nothing for CONNECT. */
  readonly head?: Buffer | undefined;
}

/**
 * The offset just past the empty line that ends the head in `buf`, or -1 while there is none.
 * `from`: where new bytes start (the scan resumes a few bytes before it).
 */
export function headEnd(buf: Buffer, from = 0): number {
  let at = Math.max(0, from - 3);
  for (;;) {
    const lf = buf.indexOf(0x0a, at);
    if (lf < 0) return -1;
    if (buf[lf + 1] === 0x0a) return lf + 2;
    if (buf[lf + 1] === 0x0d && buf[lf + 2] === 0x0a) return lf + 3;
    at = lf + 1;
  }
}

/** `host:port` of a CONNECT target or URL authority (IPv6 in brackets); undefined if malformed. */
export function splitAuthority(
  authority: string,
  defaultPort: number | undefined,
): { host: string; port: number } | undefined {
  // No `@`: userinfo has no place in a proxy's target, and `a@b` would name two hosts.
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]/\s@]+))(?::(\d{1,5}))?$/.exec(authority);
  if (!m) return undefined;
  const host = (m[1] ?? m[2] ?? '').toLowerCase();
  const port = m[3] !== undefined ? Number(m[3]) : defaultPort;
  if (host === '' || port === undefined || port < 1 || port > 65535) return undefined;
  return { host, port };
}

const fieldName = (line: string): string => line.slice(0, line.indexOf(':')).toLowerCase();

/**
 * The field names a request's `Connection` fields list: they concern this hop only and are
 * dropped with it (RFC 9110 §7.6.1), so a client cannot make the proxy pass on, say,
 * `Connection: close, X-Forwarded-For` as the origin would read it. `Transfer-Encoding` and
 * `Content-Length` stay whatever is listed: the body is forwarded as it is, and its framing with it.
 */
function connectionOptions(fields: readonly string[]): Set<string> {
  const named = new Set<string>();
  for (const line of fields) {
    if (fieldName(line) !== 'connection') continue;
    for (const option of line.slice(line.indexOf(':') + 1).split(',')) named.add(option.trim().toLowerCase());
  }
  named.delete('transfer-encoding');
  named.delete('content-length');
  return named;
}

/** Why the field lines cannot be forwarded as they are, or undefined when they can. */
function badField(fields: readonly string[]): string | undefined {
  const bad = fields.find((l) => !FIELD.test(l));
  if (bad === undefined) return undefined;
  if (/^[ \t]/.test(bad)) return 'a folded header line (obs-fold) is not accepted';
  return `malformed header line ${JSON.stringify(bad.slice(0, 60))}`;
}

/**
 * The destination of a request head (with or without its empty line), with the head to forward;
 * a string says why it is malformed. An absolute-form request is forwarded in origin form with
 * `Host` set to the target's authority, whatever `Host` the client sent (RFC 9112 §3.2.2), so the
 * destination serves the name that was checked.
 */
export function parseRequestHead(head: string): Target | string {
  if (/\r(?!\n)/.test(head)) return 'a bare CR in the request head';
  const lines = head.split(/\r?\n/);
  while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  const parts = (lines[0] ?? '').split(' ');
  const [method = '', target = '', version = ''] = parts;
  if (parts.length !== 3 || !TOKEN.test(method) || !/^HTTP\/1\.[01]$/.test(version)) return 'not an HTTP/1.x request';
  const fields = lines.slice(1);
  const bad = badField(fields);
  if (bad !== undefined) return bad;
  if (method === 'CONNECT') {
    const a = splitAuthority(target, undefined);
    return a ? { method, ...a } : `CONNECT target ${target} is not host:port`;
  }
  const url = /^http:\/\/([^/?#]+)([^#]*)$/i.exec(target);
  if (!url) return `${target} is not an absolute http:// URL (use CONNECT for https)`;
  const authority = (url[1] ?? '').toLowerCase();
  const a = splitAuthority(authority, 80);
  if (!a) return `${url[1]} is not host[:port]`;
  const named = connectionOptions(fields);
  const kept = fields.filter((l) => {
    const name = fieldName(l);
    return name !== 'host' && !HOP_HEADERS.has(name) && !named.has(name);
  });
  const path = url[2] === '' || url[2] === undefined ? '/' : url[2].startsWith('/') ? url[2] : `/${url[2]}`;
  const out = [`${method} ${path} ${version}`, `Host: ${authority}`, ...kept, 'Connection: close', '', ''].join('\r\n');
  return { method, ...a, head: Buffer.from(out, 'latin1') };
}
