/**
 * The policy gate end to end, table-driven: approval policy x deny-read x outcome, on both
 * backends, with real sandboxes denying a real write (outside the writable roots) and a real
 * read (a deny-read file). For each row: who was asked, whether it was retried, whether
 * `sandboxDenied` was reported, and that the client never saw output of a retried attempt or
 * the deny-read file's content.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { BACKENDS } from '../support/backends.ts';
import { startServer, TestSession, unb64, type BackendKind, type TestServer } from '../support/harness.ts';

type Outcome = 'early-denial' | 'late-denial' | 'early-failure' | 'success';
type PolicyName = 'untrusted' | 'on-failure' | 'on-request' | 'never' | 'granular-yes' | 'granular-no';

const POLICIES: PolicyName[] = ['untrusted', 'on-failure', 'on-request', 'never', 'granular-yes', 'granular-no'];
const OUTCOMES: Outcome[] = ['early-denial', 'late-denial', 'early-failure', 'success'];

function approvalPolicy(p: PolicyName): unknown {
  if (p === 'granular-yes') return { granular: { sandboxApproval: true } };
  if (p === 'granular-no') return { granular: { sandboxApproval: false } };
  return p;
}

const allowsRetry = (p: PolicyName): boolean => p === 'untrusted' || p === 'on-failure' || p === 'granular-yes';

/** A directory outside the writable roots, writable only without the sandbox. */
const OUTSIDE: Record<BackendKind, string> = { local: '/var/tmp', docker: '/' };

function command(outcome: Outcome, outside: string, secret: string, tag: string): string {
  // Each attempt says whether it ran sandboxed, so a leaked first attempt is visible.
  const who = `echo attempt-$(test -w ${outside} && echo free || echo boxed)`;
  const target = `${outside.replace(/\/$/, '')}/exec-server-probe-${tag}`;
  switch (outcome) {
    case 'early-denial':
      return `${who}; cat ${secret} 2>&1; echo x > ${target} && rm -f ${target}`;
    case 'late-denial':
      return `${who}; sleep 0.5; echo x > ${target} && rm -f ${target}`;
    case 'early-failure':
      return `${who}; echo plain failure; exit 3`;
    case 'success':
      return `${who}; exit 0`;
  }
}

interface Expectation {
  asked: string[];
  retried: boolean;
  denied: boolean;
}

function expected(policy: PolicyName, denyRead: boolean, outcome: Outcome): Expectation {
  const asked = policy === 'untrusted' ? ['initial'] : [];
  if (outcome !== 'early-denial') return { asked, retried: false, denied: false };
  if (denyRead || !allowsRetry(policy)) return { asked, retried: false, denied: true };
  // untrusted: the initial approval counts as "already approved" for the retry.
  return { asked: policy === 'untrusted' ? asked : ['sandbox-retry'], retried: true, denied: false };
}

for (const backend of BACKENDS) {
  describe(`policy gate table [${backend}]`, { timeout: 600_000 }, () => {
    let server: TestServer;
    test('setup', async () => {
      server = await startServer({ backend });
    });
    for (const policy of POLICIES) {
      for (const denyRead of [false, true]) {
        test(`${policy}, deny-read ${denyRead ? 'yes' : 'no'}`, async () => {
          const asked: string[] = [];
          const secretText = `TOPSECRET-${randomBytes(6).toString('hex')}`;
          const s = await TestSession.open(
            server.url,
            {},
            {
              onServerRequest: (method, params) => {
                assert.equal(method, 'approval/request');
                asked.push(String(params['purpose']));
                return { decision: 'approved' };
              },
            },
          );
          const info = await s.request<Record<string, unknown>>('session/info', {});
          const workdir = String(info['workdir']);
          await s.close();
          // The secret lives in the workspace of a first session that has no policy of its own;
          // the session under test is created with the wanted policy and deny-read list.
          const secretPath = `${workdir}/secret.txt`;
          const setup = await TestSession.open(server.url, { resumeSessionId: s.sessionId });
          await setup
            .request('fs/writeFile', { path: secretPath, dataBase64: Buffer.from(secretText).toString('base64') })
            .catch(async () => {
              await setup.run('mk-secret', ['sh', '-c', `printf %s ${secretText} > ${secretPath}`]);
            });
          await setup.close();
          const session = await TestSession.open(
            server.url,
            {
              session: {
                approvalPolicy: approvalPolicy(policy),
                workdir,
                ...(denyRead ? { denyRead: [secretPath] } : {}),
              },
            },
            {
              onServerRequest: (_m, params) => {
                asked.push(String(params['purpose']));
                return { decision: 'approved' };
              },
            },
          );
          try {
            for (const outcome of OUTCOMES) {
              asked.length = 0;
              const id = `${outcome}-${randomBytes(3).toString('hex')}`;
              const r = await session.run(id, ['sh', '-c', command(outcome, OUTSIDE[backend], secretPath, id)]);
              const want = expected(policy, denyRead, outcome);
              const row = `${backend} ${policy} deny-read=${denyRead} ${outcome}`;
              const escalated = r.events.some((e) => e.method === 'process/escalated');
              assert.deepEqual(asked, want.asked, `${row}: asked`);
              assert.equal(escalated, want.retried, `${row}: retried`);
              assert.equal(r.exited['sandboxDenied'], want.denied, `${row}: sandboxDenied`);
              const read = await session.request<Record<string, unknown>>('process/read', {
                processId: id,
                afterSeq: 0,
              });
              assert.equal(read['sandboxDenied'], want.denied, `${row}: process/read sandboxDenied`);
              const seen =
                r.stdout +
                r.stderr +
                (read['chunks'] as Array<Record<string, unknown>>).map((c) => unb64(c['chunk'])).join('');
              if (want.retried) {
                assert.ok(
                  !seen.includes('attempt-boxed'),
                  `${row}: output of the denied attempt reached the client: ${seen}`,
                );
                assert.ok(seen.includes('attempt-free'), `${row}: retry output missing`);
                assert.equal(r.exited['exitCode'], 0, `${row}: retry exit`);
              } else {
                assert.ok(seen.includes('attempt-boxed'), `${row}: sandboxed attempt output missing: ${seen}`);
              }
              if (denyRead) assert.ok(!seen.includes(secretText), `${row}: deny-read content reached the client`);
              if (outcome === 'early-failure') assert.equal(r.exited['exitCode'], 3);
              if (outcome === 'late-denial') assert.notEqual(r.exited['exitCode'], 0);
            }
          } finally {
            await session.close();
          }
        });
      }
    }
    test('teardown', async () => {
      await server.close();
    });
  });
}
