import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decideInitial, decideRetry } from '../../src/policy/approval-gate.ts';
import { isLikelySandboxDenied } from '../../src/policy/denial-classifier.ts';
import { canRead, canWrite, resolveSandbox } from '../../src/policy/sandbox-policy.ts';
import { sessionPolicy as policy } from '../support/session-policy.ts';

test('classifier: keywords first, then 2/126/127, then SIGSYS under bubblewrap; never for none or exit 0', () => {
  const c = (exitCode: number, output: string, sandboxType: 'none' | 'bubblewrap' | 'container-user' = 'bubblewrap') =>
    isLikelySandboxDenied({ sandboxType, exitCode, output });
  assert.equal(c(1, "sh: can't create /x: Read-only file system"), true);
  assert.equal(c(126, 'bash: ./x: Permission denied'), true);
  assert.equal(c(127, 'PERMISSION DENIED'), true);
  assert.equal(c(127, 'bash: foo: command not found'), false);
  assert.equal(c(2, 'usage'), false);
  assert.equal(c(159, ''), true);
  assert.equal(c(159, '', 'container-user'), false);
  assert.equal(c(0, 'permission denied'), false);
  assert.equal(c(1, 'operation not permitted', 'none'), false);
  for (const k of ['Operation not permitted', 'seccomp', 'sandbox', 'landlock', 'failed to write file'])
    assert.equal(c(1, `x ${k} y`), true, k);
  assert.equal(c(1, 'plain failure'), false);
});

test('gate before the first attempt', () => {
  const base = { sandboxPermissions: 'use-default' as const, preApproved: false, cachedForSession: false };
  assert.equal(decideInitial({ ...base, policy: policy({ approvalPolicy: 'untrusted' }) }).kind, 'ask');
  assert.deepEqual(decideInitial({ ...base, preApproved: true, policy: policy({ approvalPolicy: 'untrusted' }) }), {
    kind: 'run',
    sandboxed: true,
    approved: true,
  });
  assert.equal(
    decideInitial({
      ...base,
      preApproved: true,
      policy: policy({ approvalPolicy: 'untrusted', strictAutoReview: true }),
    }).kind,
    'ask',
  );
  assert.deepEqual(decideInitial({ ...base, policy: policy({ approvalPolicy: 'never' }) }), {
    kind: 'run',
    sandboxed: true,
    approved: false,
  });
  const esc = { ...base, sandboxPermissions: 'require-escalated' as const };
  assert.equal(decideInitial({ ...esc, policy: policy({ approvalPolicy: 'never' }) }).kind, 'reject');
  assert.equal(decideInitial({ ...esc, policy: policy({ approvalPolicy: 'on-failure' }) }).kind, 'reject');
  assert.deepEqual(decideInitial({ ...esc, policy: policy({ approvalPolicy: 'on-request' }) }), {
    kind: 'ask',
    reason: 'command asks to run without the sandbox',
    thenSandboxed: false,
  });
  assert.deepEqual(decideInitial({ ...esc, policy: policy({ approvalPolicy: 'on-request', denyRead: ['/secret'] }) }), {
    kind: 'ask',
    reason: 'command asks to run without the sandbox',
    thenSandboxed: true,
  });
});

test('gate after a denial, in the order of docs/protocol.md ("Approvals and the policy gate", step 4)', () => {
  assert.equal(decideRetry(policy({ approvalPolicy: 'on-request' }), true).kind, 'report');
  assert.equal(decideRetry(policy({ approvalPolicy: 'never' }), true).kind, 'report');
  assert.equal(decideRetry(policy({ approvalPolicy: { granular: { sandboxApproval: false } } }), false).kind, 'report');
  assert.equal(decideRetry(policy({ approvalPolicy: { granular: { sandboxApproval: true } } }), false).kind, 'ask');
  assert.equal(decideRetry(policy({ denyRead: ['/s'] }), true).kind, 'report');
  assert.equal(decideRetry(policy(), true).kind, 'retry');
  assert.equal(decideRetry(policy({ strictAutoReview: true }), true).kind, 'ask');
  assert.equal(decideRetry(policy(), false).kind, 'ask');
  assert.equal(decideRetry(policy({ denialHandling: 'report' }), true).kind, 'report');
});

test('sandbox resolution: writable roots, read-only, deny-read, narrowing never widens', () => {
  const ws = resolveSandbox(policy(), '/w');
  assert.deepEqual(ws, { kind: 'restricted', writableRoots: ['/w', '/tmp'], denyRead: [], network: false });
  assert.equal(canWrite(ws, '/w/a/b'), true);
  assert.equal(canWrite(ws, '/etc/x'), false);
  assert.equal(canWrite(ws, '/wx'), false);
  const ro = resolveSandbox(policy({ sandbox: { type: 'read-only' } }), '/w');
  assert.equal(canWrite(ro, '/w/a'), false);
  const dr = resolveSandbox(policy({ denyRead: ['/w/secret'] }), '/w');
  assert.equal(canRead(dr, '/w/secret/x'), false);
  assert.equal(canWrite(dr, '/w/secret/x'), false);
  const narrowed = resolveSandbox(policy(), '/w', { writableRoots: ['/w/sub', '/etc'] });
  assert.deepEqual(narrowed.kind === 'restricted' && narrowed.writableRoots, ['/w/sub']);
  const wider = resolveSandbox(policy({ sandbox: { type: 'read-only' } }), '/w', { writableRoots: ['/w'] });
  assert.deepEqual(wider.kind === 'restricted' && wider.writableRoots, []);
  assert.deepEqual(resolveSandbox(policy({ sandbox: { type: 'danger-full-access' } }), '/w'), { kind: 'unrestricted' });
  const net = resolveSandbox(policy({ sandbox: { type: 'workspace-write', networkAccess: true } }), '/w', {
    network: false,
  });
  assert.equal(net.kind === 'restricted' && net.network, false);
});

test('sandboxed attempts get TMPDIR inside a writable root, never an inherited one', async () => {
  const { sandboxedEnvironment } = await import('../../src/policy/sandbox-policy.ts');
  const env = { TMPDIR: '/server/private', PATH: '/bin' };
  assert.deepEqual(
    sandboxedEnvironment(env, { kind: 'restricted', writableRoots: ['/w', '/tmp'], denyRead: [], network: false }),
    { PATH: '/bin', TMPDIR: '/tmp' },
  );
  assert.deepEqual(
    sandboxedEnvironment(env, { kind: 'restricted', writableRoots: ['/w'], denyRead: [], network: false }),
    { PATH: '/bin', TMPDIR: '/w' },
  );
  assert.deepEqual(sandboxedEnvironment(env, { kind: 'restricted', writableRoots: [], denyRead: [], network: false }), {
    PATH: '/bin',
  });
  assert.deepEqual(sandboxedEnvironment(env, { kind: 'unrestricted' }), env);
});
