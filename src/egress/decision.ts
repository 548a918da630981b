/**
 * The egress decision (docs/architecture.md, "Egress"): whether a session may reach `host:port`,
 * decided from the allow-list and the addresses the server resolved the host to, without dialling
 * anything. The proxy then dials exactly the address returned here, never the name again, so a
 * name that resolves elsewhere between check and use (DNS rebinding) changes nothing.
 *
 * Every address is first brought to one spelling (ip-address.ts): an IPv4-mapped IPv6 address is
 * its IPv4 address, judged and dialled as such. Rules, in order:
 * - the unspecified, multicast, broadcast and reserved ranges are never reached;
 * - the cloud metadata addresses (169.254.169.254, fd00:ec2::254) only by an `ip` entry naming
 *   exactly that address;
 * - an IPv6 address of a translation or tunnelling form (IPv4-compatible, IPv4-translated,
 *   NAT64, 6to4, Teredo) only by an `ip`/`cidr` entry that contains it, and never when the IPv4
 *   address it carries is never reached, or the metadata address (then only by its exact `ip`):
 *   a `*`, a host name or a domain would otherwise reach loopback as `::7f00:1`;
 * - loopback, link-local, private (RFC 1918, CGNAT, IPv6 unique-local and site-local) only by an
 *   `ip`/`cidr` entry that contains the address (a `*`, a host name or a domain never reaches them);
 * - any other address by an entry that matches: `*`, the host name, a domain above it, or an
 *   `ip`/`cidr` containing the address; an entry with a port matches that port only.
 */
import { BlockList, isIP, isIPv4 } from 'node:net';
import { cidrContains, type AllowEntry } from './allow-list.ts';
import { canonicalAddress, type EmbeddedIPv4, embeddedIPv4 } from './ip-address.ts';

export { canonicalAddress };

export type EgressDecision =
  | { readonly allowed: true; readonly address: string; readonly entry: string }
  | { readonly allowed: false; readonly reason: string };

function ranges(list: ReadonlyArray<readonly [string, number]>): BlockList {
  const b = new BlockList();
  for (const [a, p] of list) b.addSubnet(a, p, isIPv4(a) ? 'ipv4' : 'ipv6');
  return b;
}

const NEVER = ranges([
  ['0.0.0.0', 8],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
  ['::', 128],
  ['ff00::', 8],
  // Discard-only (RFC 6666).
  ['100::', 64],
]);
const METADATA = new Set(['169.254.169.254', 'fd00:ec2::254']);
/** Reached only by an `ip`/`cidr` entry that names them. */
const INTERNAL: ReadonlyArray<readonly [BlockList, string]> = [
  [
    ranges([
      ['127.0.0.0', 8],
      ['::1', 128],
    ]),
    'loopback',
  ],
  [
    ranges([
      ['169.254.0.0', 16],
      ['fe80::', 10],
    ]),
    'link-local',
  ],
  [
    ranges([
      ['10.0.0.0', 8],
      ['172.16.0.0', 12],
      ['192.168.0.0', 16],
      ['100.64.0.0', 10],
      ['fc00::', 7],
      // Site-local, deprecated but still routed inside some networks.
      ['fec0::', 10],
    ]),
    'private',
  ],
];

function check(list: BlockList, address: string): boolean {
  return list.check(address, isIPv4(address) ? 'ipv4' : 'ipv6');
}

/** Why an address is internal (`loopback`...), or undefined for a public one. */
export function internalKind(address: string): string | undefined {
  for (const [list, kind] of INTERNAL) if (check(list, address)) return kind;
  return undefined;
}

function portMatches(entry: { readonly port?: number | undefined }, port: number): boolean {
  return entry.port === undefined || entry.port === port;
}

/** Whether a name entry (`*`, host, domain) matches `host` (a name, or the literal as given). */
function nameMatches(entry: AllowEntry, host: string, port: number): boolean {
  if (entry.kind === 'any') return true;
  if (entry.kind === 'host') return entry.host === host && portMatches(entry, port);
  if (entry.kind === 'suffix') return host.endsWith(`.${entry.domain}`) && portMatches(entry, port);
  return false;
}

type CidrEntry = Extract<AllowEntry, { kind: 'cidr' }>;
type Verdict = { entry: string } | { reason: string };

/**
 * An address reached only by an ip/cidr entry that contains it: the first such entry for this
 * port, or `why` (or, when the entries that name it are for other ports, that the port is missing).
 */
function namedOnly(
  allow: readonly AllowEntry[],
  cidrs: readonly CidrEntry[],
  target: string,
  address: string,
  why: string,
): Verdict {
  const named = cidrs[0];
  if (named) return { entry: named.text };
  const otherPort = allow.some((e) => e.kind === 'cidr' && cidrContains(e, address));
  return { reason: otherPort ? `${target} is not in the session's allow-list (other ports of ${address} are)` : why };
}

/** An IPv6 address that carries an IPv4 one (NAT64, 6to4...): judged by both (see the rules above). */
function decideEmbedded(
  allow: readonly AllowEntry[],
  cidrs: readonly CidrEntry[],
  target: string,
  address: string,
  embedded: EmbeddedIPv4,
): Verdict {
  const inner = embedded.ipv4;
  const what =
    inner === undefined ? `${address} is a ${embedded.form} address` : `${address} carries ${inner} (${embedded.form})`;
  if (inner !== undefined && check(NEVER, inner)) return { reason: `${what}, which is never reachable` };
  if (inner !== undefined && METADATA.has(inner)) {
    const exact = cidrs.find((e) => e.exact);
    return exact ? { entry: exact.text } : { reason: `${what}, the cloud metadata address (allow it by its exact ip)` };
  }
  return namedOnly(allow, cidrs, target, address, `${what}: allow it by an ip or cidr entry that contains it`);
}

/** One canonical address: allowed with the entry that allows it, or the reason it is refused. */
function decideAddress(allow: readonly AllowEntry[], host: string, port: number, address: string): Verdict {
  if (isIP(address) === 0) return { reason: `${address} is not an address` };
  if (check(NEVER, address)) return { reason: `${address} is never reachable (unspecified, multicast or reserved)` };
  const cidrs = allow.filter(
    (e): e is CidrEntry => e.kind === 'cidr' && portMatches(e, port) && cidrContains(e, address),
  );
  if (METADATA.has(address)) {
    const exact = cidrs.find((e) => e.exact);
    return exact
      ? { entry: exact.text }
      : { reason: `${address} is the cloud metadata address (allow it by its exact ip)` };
  }
  const target = `${host}:${port}`;
  const embedded = embeddedIPv4(address);
  if (embedded !== undefined) return decideEmbedded(allow, cidrs, target, address, embedded);
  const internal = internalKind(address);
  if (internal !== undefined)
    return namedOnly(
      allow,
      cidrs,
      target,
      address,
      `${address} is a ${internal} address (allow it by an ip or cidr entry)`,
    );
  const entry = cidrs[0] ?? allow.find((e) => nameMatches(e, host, port));
  return entry ? { entry: entry.text } : { reason: `${target} is not in the session's allow-list` };
}

/**
 * Whether `host:port` may be reached, given the addresses the host resolved to (for a literal,
 * the literal itself). The first address allowed is the one to dial; when none is, the reason
 * names the first refused one.
 */
export function decideEgress(
  allow: readonly AllowEntry[],
  host: string,
  port: number,
  addresses: readonly string[],
): EgressDecision {
  const name = host.toLowerCase().replace(/\.$/, '');
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    return { allowed: false, reason: `port ${port} is not valid` };
  if (addresses.length === 0) return { allowed: false, reason: `${name} has no address` };
  let firstReason: string | undefined;
  for (const raw of addresses) {
    const address = canonicalAddress(raw);
    const d = decideAddress(allow, name, port, address);
    if ('entry' in d) return { allowed: true, address, entry: d.entry };
    firstReason ??= d.reason;
  }
  return { allowed: false, reason: firstReason ?? `${name} is refused` };
}

/**
 * Whether the list could allow `host:port` at all, before resolving it: a name no entry matches
 * is refused without a DNS query (and an IP literal is decided at once by `decideEgress`).
 */
export function mayAllowName(allow: readonly AllowEntry[], host: string, port: number): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return allow.some((e) => (e.kind === 'cidr' ? portMatches(e, port) : nameMatches(e, name, port)));
}
