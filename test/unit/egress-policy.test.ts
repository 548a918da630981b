/**
 * The egress allow-list and decision (src/egress/allow-list.ts, decision.ts): entries parsed
 * once with clear refusals, and every decision taken from the resolved addresses alone, so the
 * private, link-local and metadata refusals are checked here without dialling anything.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAllowEntry, parseAllowList } from '../../src/egress/allow-list.ts';
import { canonicalAddress, decideEgress, mayAllowName } from '../../src/egress/decision.ts';
import { ExecServerError } from '../../src/errors.ts';

test('allow-list entries: every documented form parses', () => {
  assert.deepEqual(parseAllowEntry('*'), { kind: 'any', text: '*' });
  assert.deepEqual(parseAllowEntry('Example.COM'), {
    kind: 'host',
    host: 'example.com',
    port: undefined,
    text: 'example.com',
  });
  assert.deepEqual(parseAllowEntry('api.example.com:443'), {
    kind: 'host',
    host: 'api.example.com',
    port: 443,
    text: 'api.example.com:443',
  });
  assert.deepEqual(parseAllowEntry('*.github.com:443'), {
    kind: 'suffix',
    domain: 'github.com',
    port: 443,
    text: '*.github.com:443',
  });
  const ip = parseAllowEntry('10.1.2.3:5432');
  assert.ok(typeof ip !== 'string' && ip.kind === 'cidr' && ip.exact && ip.port === 5432 && ip.prefix === 32);
  const cidr = parseAllowEntry('10.0.0.0/8');
  assert.ok(typeof cidr !== 'string' && cidr.kind === 'cidr' && !cidr.exact && cidr.port === undefined);
  const v6 = parseAllowEntry('[fd00::/8]:443');
  assert.ok(typeof v6 !== 'string' && v6.kind === 'cidr' && v6.family === 'ipv6' && v6.port === 443);
  const bare6 = parseAllowEntry('::1');
  assert.ok(typeof bare6 !== 'string' && bare6.kind === 'cidr' && bare6.exact && bare6.port === undefined);
  const port6 = parseAllowEntry('[::1]:8080');
  assert.ok(typeof port6 !== 'string' && port6.kind === 'cidr' && port6.port === 8080);
});

test('allow-list entries: malformed ones are refused with the entry and the reason', () => {
  for (const [entry, why] of [
    ['', /empty/],
    ['host:0', /port 0/],
    ['host:70000', /port 70000/],
    ['host:http', /port http/],
    ['10.0.0.0/33', /prefix/],
    ['999.1.1.1', /not an IP address/],
    ['1.2.3', /not an IP address/],
    ['[example.com]:80', /not an IP address/],
    ['*.', /not a host name/],
    ['*.-x.com', /not a domain/],
    ['ex ample.com', /not a host name/],
    ['-bad.com', /not a host name/],
    ['*:443', /not a host name/],
    ['[::1', /brackets/],
  ] as const)
    assert.match(String(parseAllowEntry(entry)), why, entry);
  assert.throws(
    () => parseAllowList(['example.com', 'bad host']),
    (err: unknown) =>
      err instanceof ExecServerError &&
      err.code === 'EXEC_ERR_INVALID_PARAMS' &&
      err.statusCode === 400 &&
      /session\.network\.allow\[1\] "bad host"/.test(err.message),
  );
  assert.throws(() => parseAllowList(Array.from({ length: 257 }, () => '*')), /more than 256/);
});

const allow = (...entries: string[]) => parseAllowList(entries);

test('decision: names, domains, ports and `*` on public addresses', () => {
  assert.deepEqual(decideEgress(allow('example.com'), 'example.com', 443, ['93.184.216.34']), {
    allowed: true,
    address: '93.184.216.34',
    entry: 'example.com',
  });
  assert.equal(decideEgress(allow('example.com:443'), 'example.com', 80, ['93.184.216.34']).allowed, false);
  assert.equal(decideEgress(allow('*.example.com'), 'api.example.com', 80, ['93.184.216.34']).allowed, true);
  assert.equal(decideEgress(allow('*.example.com'), 'example.com', 80, ['93.184.216.34']).allowed, false);
  assert.equal(decideEgress(allow('*.example.com'), 'evilexample.com', 80, ['93.184.216.34']).allowed, false);
  assert.equal(decideEgress(allow('*'), 'anything.test', 8080, ['203.0.113.9']).allowed, true);
  assert.equal(decideEgress(allow('203.0.113.0/24:22'), 'ssh.test', 22, ['203.0.113.9']).allowed, true);
  assert.equal(decideEgress(allow('other.com'), 'example.com', 443, ['93.184.216.34']).allowed, false);
  assert.equal(decideEgress(allow('*'), 'x.test', 0, ['203.0.113.9']).allowed, false);
  assert.equal(decideEgress(allow('*'), 'x.test', 80, []).allowed, false);
});

test('decision: private, loopback, link-local need an ip/cidr entry; `*` and names never reach them', () => {
  for (const address of [
    '10.0.0.5',
    '172.16.3.4',
    '192.168.1.1',
    '100.64.0.1',
    '127.0.0.1',
    '169.254.1.1',
    'fd12::1',
    'fe80::1',
    '::1',
    'fec0::1',
  ]) {
    const d = decideEgress(allow('*', 'internal.test'), 'internal.test', 80, [address]);
    assert.equal(d.allowed, false, address);
    assert.match(d.allowed ? '' : d.reason, /private|loopback|link-local/, address);
  }
  assert.equal(decideEgress(allow('10.0.0.0/8'), '10.1.2.3', 5432, ['10.1.2.3']).allowed, true);
  assert.equal(decideEgress(allow('10.1.2.3:5432'), 'db.internal', 5432, ['10.1.2.3']).allowed, true);
  assert.equal(decideEgress(allow('10.1.2.3:5432'), 'db.internal', 5433, ['10.1.2.3']).allowed, false);
  assert.equal(decideEgress(allow('127.0.0.2'), '127.0.0.2', 80, ['127.0.0.2']).allowed, true);
  // IPv4-mapped IPv6 is the same destination.
  assert.equal(canonicalAddress('::ffff:127.0.0.1'), '127.0.0.1');
  assert.equal(decideEgress(allow('*'), 'x.test', 80, ['::ffff:10.0.0.1']).allowed, false);
});

test('decision: the metadata address only by its exact ip; unspecified and multicast never', () => {
  for (const list of [allow('*'), allow('169.254.0.0/16'), allow('0.0.0.0/0'), allow('metadata.google.internal')]) {
    const d = decideEgress(list, 'metadata.google.internal', 80, ['169.254.169.254']);
    assert.equal(d.allowed, false);
    assert.match(d.allowed ? '' : d.reason, /metadata/);
  }
  assert.equal(decideEgress(allow('169.254.169.254:80'), '169.254.169.254', 80, ['169.254.169.254']).allowed, true);
  assert.equal(decideEgress(allow('*'), 'x', 80, ['fd00:ec2::254']).allowed, false);
  for (const address of ['0.0.0.0', '224.0.0.1', '255.255.255.255', '::', 'ff02::1', '100::1'])
    assert.equal(decideEgress(allow('0.0.0.0/0', '::/0', '*'), address, 80, [address]).allowed, false, address);
});

test('decision: a name that resolves to several addresses dials the first allowed one (never a refused one)', () => {
  const d = decideEgress(allow('*'), 'rebind.test', 80, ['127.0.0.1', '203.0.113.7']);
  assert.deepEqual(d, { allowed: true, address: '203.0.113.7', entry: '*' });
  const none = decideEgress(allow('*'), 'rebind.test', 80, ['127.0.0.1', '10.0.0.1']);
  assert.equal(none.allowed, false);
  assert.match(none.allowed ? '' : none.reason, /127\.0\.0\.1 is a loopback address/);
});

test('decision: names no entry could match are refused before any lookup', () => {
  assert.equal(mayAllowName(allow('example.com'), 'other.com', 80), false);
  assert.equal(mayAllowName(allow('example.com:443'), 'example.com', 80), false);
  assert.equal(mayAllowName(allow('example.com'), 'EXAMPLE.com.', 80), true);
  // An ip/cidr entry may match whatever a name resolves to: the name must be looked up.
  assert.equal(mayAllowName(allow('10.0.0.0/8'), 'db.internal', 80), true);
});

test('decision: an IPv4-mapped address is its IPv4 address, in every spelling, and is dialled as such', () => {
  for (const spelling of ['::ffff:127.0.0.2', '::ffff:7f00:2', '0:0:0:0:0:ffff:7f00:2', '::FFFF:7F00:2'])
    assert.equal(canonicalAddress(spelling), '127.0.0.2', spelling);
  // Named by its IPv4 entry: the mapped form reaches it (and dials the IPv4 address).
  assert.deepEqual(decideEgress(allow('127.0.0.2:18960'), '::ffff:7f00:2', 18960, ['::ffff:7f00:2']), {
    allowed: true,
    address: '127.0.0.2',
    entry: '127.0.0.2:18960',
  });
  // An entry written in the mapped form names the IPv4 address too.
  assert.equal(decideEgress(allow('::ffff:127.0.0.2'), '127.0.0.2', 80, ['127.0.0.2']).allowed, true);
  assert.equal(decideEgress(allow('[::ffff:10.0.0.0/104]:80'), '10.9.8.7', 80, ['10.9.8.7']).allowed, true);
  for (const [spelling, why] of [
    ['::ffff:7f00:1', /127\.0\.0\.1 is a loopback address/],
    ['::ffff:a00:1', /10\.0\.0\.1 is a private address/],
    ['::ffff:a9fe:a9fe', /169\.254\.169\.254 is the cloud metadata address/],
  ] as const) {
    const d = decideEgress(allow('*'), spelling, 80, [spelling]);
    assert.match(d.allowed ? 'allowed' : d.reason, why, spelling);
  }
  assert.equal(decideEgress(allow('169.254.169.254'), 'x', 80, ['::ffff:a9fe:a9fe']).allowed, true);
  // Other spellings of the IPv6 special addresses are recognised too.
  assert.equal(canonicalAddress('FD00:EC2:0:0:0:0:0:254'), 'fd00:ec2::254');
  assert.equal(decideEgress(allow('*', 'fd00::/8'), 'x', 80, ['FD00:EC2:0:0:0:0:0:254']).allowed, false);
  assert.equal(decideEgress(allow('*'), 'x', 80, ['0:0:0:0:0:0:0:1']).allowed, false);
});

test('decision: IPv6 translation forms never pass `*` or a name; only an ip/cidr entry that contains them', () => {
  const forms: ReadonlyArray<readonly [string, RegExp]> = [
    ['::7f00:1', /carries 127\.0\.0\.1 \(IPv4-compatible\)/],
    ['::127.0.0.1', /carries 127\.0\.0\.1 \(IPv4-compatible\)/],
    ['64:ff9b::7f00:1', /carries 127\.0\.0\.1 \(NAT64\)/],
    ['64:ff9b::a9fe:a9fe', /carries 169\.254\.169\.254 \(NAT64\), the cloud metadata address/],
    ['64:ff9b::5db8:d822', /carries 93\.184\.216\.34 \(NAT64\)/],
    ['64:ff9b:1::7f00:1', /NAT64 \(local-use prefix\)/],
    ['::ffff:0:7f00:1', /carries 127\.0\.0\.1 \(IPv4-translated\)/],
    ['2002:7f00:1::', /carries 127\.0\.0\.1 \(6to4\)/],
    ['2002:a9fe:a9fe::1', /cloud metadata address/],
    // Teredo: the client's address is stored inverted (~127.0.0.1 = 80ff:fffe).
    ['2001:0:4136:e378:8000:63bf:80ff:fffe', /carries 127\.0\.0\.1 \(Teredo\)/],
    ['64:ff9b::e000:1', /carries 224\.0\.0\.1 \(NAT64\), which is never reachable/],
  ];
  for (const [address, why] of forms) {
    const d = decideEgress(allow('*', 'named.test'), 'named.test', 80, [address]);
    assert.equal(d.allowed, false, address);
    assert.match(d.allowed ? '' : d.reason, why, address);
  }
  // Named explicitly, they are reached (and dialled as written, in canonical form)...
  assert.deepEqual(decideEgress(allow('64:ff9b::/96'), 'v4only.test', 443, ['64:ff9b:0:0::5db8:d822']), {
    allowed: true,
    address: '64:ff9b::5db8:d822',
    entry: '64:ff9b::/96',
  });
  assert.equal(decideEgress(allow('[2002::/16]:443'), 'x', 443, ['2002:7f00:1::']).allowed, true);
  assert.equal(decideEgress(allow('[2002::/16]:443'), 'x', 80, ['2002:7f00:1::']).allowed, false);
  // ...but the metadata address only by its exact ip, and a never-reachable one never.
  assert.equal(decideEgress(allow('64:ff9b::/96'), 'x', 80, ['64:ff9b::a9fe:a9fe']).allowed, false);
  assert.equal(decideEgress(allow('64:ff9b::a9fe:a9fe'), 'x', 80, ['64:ff9b::a9fe:a9fe']).allowed, true);
  assert.equal(decideEgress(allow('::/0'), 'x', 80, ['64:ff9b::e000:1']).allowed, false);
  // An entry naming the IPv4 address does not reach it through a translator (another route).
  assert.equal(decideEgress(allow('127.0.0.2'), 'x', 80, ['64:ff9b::7f00:2']).allowed, false);
  // Plain public IPv6 is untouched.
  assert.equal(decideEgress(allow('*'), 'x', 80, ['2606:2800:220:1:248:1893:25c8:1946']).allowed, true);
});
