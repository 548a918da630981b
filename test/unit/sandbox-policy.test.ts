/**
 * Sandbox resolution (src/policy/sandbox-policy.ts): writable roots per policy, a client's
 * narrowing only takes rights away, path containment, TMPDIR. (Gate and classifier: policy.test.ts.)
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ResolvedSandbox } from '../../src/backends/types.ts';
import {
  canRead,
  canWrite,
  containsDenied,
  resolveSandbox,
  type SessionPolicy,
  sandboxedEnvironment,
  writableRoots,
} from '../../src/policy/sandbox-policy.ts';
import { sessionPolicy } from '../support/session-policy.ts';

const policy = (over: Partial<SessionPolicy> = {}): SessionPolicy =>
  sessionPolicy({ approvalPolicy: 'on-request', ...over });
const restricted = (writable: string[], denyRead: string[] = []): ResolvedSandbox => ({
  kind: 'restricted',
  writableRoots: writable,
  denyRead,
  network: false,
});

test('writable roots: the workspace, /tmp unless excluded, the extra roots (normalized); none read-only; all full access', () => {
  assert.deepEqual(writableRoots({ type: 'workspace-write' }, '/w/'), ['/w/', '/tmp']);
  assert.deepEqual(
    writableRoots({ type: 'workspace-write', excludeSlashTmp: true, writableRoots: ['/data/../cache'] }, '/w'),
    ['/w', '/cache'],
  );
  assert.deepEqual(writableRoots({ type: 'read-only' }, '/w'), []);
  assert.equal(writableRoots({ type: 'danger-full-access' }, '/w'), undefined);
});

test('resolve: full access is unrestricted; network only when the policy grants it and the start does not refuse it', () => {
  assert.deepEqual(resolveSandbox(policy({ sandbox: { type: 'danger-full-access' } }), '/w'), { kind: 'unrestricted' });
  const ws = resolveSandbox(policy({ denyRead: ['/etc/shadow'] }), '/w');
  assert.deepEqual(ws, {
    kind: 'restricted',
    writableRoots: ['/w', '/tmp'],
    denyRead: ['/etc/shadow'],
    network: false,
  });
  const net = policy({ sandbox: { type: 'workspace-write', networkAccess: true } });
  const withNet = resolveSandbox(net, '/w');
  assert.ok(withNet.kind === 'restricted' && withNet.network);
  const refused = resolveSandbox(net, '/w', { network: false });
  assert.ok(refused.kind === 'restricted' && !refused.network);
  const full = resolveSandbox(policy({ sandbox: { type: 'danger-full-access' } }), '/w', { denyRead: ['/s'] });
  assert.deepEqual(full, { kind: 'restricted', writableRoots: ['/'], denyRead: ['/s'], network: true });
});

test('a narrowing keeps only what both allow: roots inside session roots, session roots inside asked ones', () => {
  const asked = (roots: string[]) => {
    const r = resolveSandbox(policy(), '/w', { writableRoots: roots, denyRead: ['/w/secret'] });
    assert.equal(r.kind, 'restricted');
    return r.kind === 'restricted' ? r : undefined;
  };
  assert.deepEqual(asked(['/w/sub'])?.writableRoots, ['/w/sub']);
  assert.deepEqual(asked(['/elsewhere'])?.writableRoots, []);
  assert.deepEqual(asked(['/'])?.writableRoots, ['/w', '/tmp']);
  assert.deepEqual(asked(['/w', '/w'])?.writableRoots, ['/w']);
  assert.deepEqual(asked([])?.writableRoots, [], 'an empty list is read-only');
  assert.deepEqual(asked(['/w'])?.denyRead, ['/w/secret']);
});

test('containment is by path component: a sibling with a common prefix is outside', () => {
  const s = restricted(['/w'], ['/w/secret']);
  assert.equal(canWrite(s, '/w'), true);
  assert.equal(canWrite(s, '/w/a/b'), true);
  assert.equal(canWrite(s, '/work'), false);
  assert.equal(canWrite(s, '/'), false);
  assert.equal(canRead(s, '/w/secret/key'), false);
  assert.equal(canWrite(s, '/w/secret/key'), false, 'deny-read is not writable either');
  assert.equal(canRead(s, '/w/secrets'), true);
  assert.equal(canRead({ kind: 'unrestricted' }, '/anything'), true);
  assert.equal(canWrite({ kind: 'unrestricted' }, '/anything'), true);
});

test('a name that starts with two dots is inside its directory, not above it', () => {
  const s = restricted(['/w'], ['/w/secret']);
  assert.equal(canRead(s, '/w/secret/..key'), false, 'inside a deny-read directory');
  assert.equal(canWrite(s, '/w/..cache'), true, 'inside the workspace');
  assert.equal(containsDenied(restricted([], ['/w/..d/x']), '/w'), true);
  assert.equal(canWrite(s, '/w/../etc'), false);
});

test('containsDenied: a deny-read path anywhere below the directory', () => {
  const s = restricted(['/w'], ['/w/a/secret']);
  assert.equal(containsDenied(s, '/w'), true);
  assert.equal(containsDenied(s, '/w/a/secret'), true);
  assert.equal(containsDenied(s, '/w/b'), false);
  assert.equal(containsDenied({ kind: 'unrestricted' }, '/'), false);
});

test('TMPDIR: /tmp when writable, else the first root, unset when read-only; unrestricted keeps the env', () => {
  const env = { TMPDIR: '/host/tmp', A: '1' };
  assert.deepEqual(sandboxedEnvironment(env, restricted(['/w', '/tmp'])), { A: '1', TMPDIR: '/tmp' });
  assert.deepEqual(sandboxedEnvironment(env, restricted(['/w'])), { A: '1', TMPDIR: '/w' });
  assert.deepEqual(sandboxedEnvironment(env, restricted([])), { A: '1' });
  assert.equal(sandboxedEnvironment(env, { kind: 'unrestricted' }), env);
});
