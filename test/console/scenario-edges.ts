/**
 * The console's less travelled paths, end to end (one backend per test file, as scenario.ts):
 * a denied approval, a session deleted elsewhere while shown, a long history in one burst,
 * and a PTY that exits while attached.
 */
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import type { SessionInfo } from '../../src/protocol/index.ts';
import type { ExecAnswer } from '../http/helpers.ts';
import { textOf } from './browser.ts';
import { agentSession, api, type Fixture, openSession, signedIn, waitForTerminal } from './scenario.ts';

export async function denyAndDeletedElsewhere(t: TestContext, f: Fixture): Promise<void> {
  const created = await api<SessionInfo>(f, 'POST', '/v1/sessions', { approvalPolicy: 'on-request' });
  const sessionId = created.body.sessionId;
  const { page, errors } = await signedIn(t, f);
  await page.locator(`tr[data-session="${sessionId}"]`).waitFor();
  await openSession(page, sessionId);
  // Asking to run without the sandbox waits for a person before it starts.
  const call = await api<ExecAnswer>(f, 'POST', `/v1/sessions/${sessionId}/exec_command`, {
    cmd: 'echo never-run',
    sandbox_permissions: 'require_escalated',
    justification: 'console deny test',
    yield_time_ms: 5000,
  });
  assert.equal(call.status, 202, JSON.stringify(call.body));
  const item = page.locator(`[data-approval="${call.body.approval_id}"]`);
  await item.waitFor({ timeout: 10_000 });
  assert.match(await textOf(item), /before start/);
  await item.getByRole('button', { name: 'Deny' }).click();
  // The denied call answers 403 EXEC_ERR_REJECTED: that is the decision taken, not an error.
  await page
    .getByRole('status')
    .filter({ hasText: /Denied: .*never-run.* rejected/ })
    .waitFor({ timeout: 10_000 });
  await item.waitFor({ state: 'detached' });
  assert.equal(await page.getByText('The decision was not taken').count(), 0);
  assert.equal(
    (await api<{ approvals: unknown[] }>(f, 'GET', `/v1/sessions/${sessionId}/approvals`)).body.approvals.length,
    0,
  );

  // Deleted by someone else while shown: the view says so instead of showing the last answer.
  assert.equal((await api(f, 'DELETE', `/v1/sessions/${sessionId}`)).status, 204);
  await page
    .getByRole('alert')
    .filter({ hasText: /does not exist/ })
    .waitFor({ timeout: 15_000 });
  assert.equal(await page.locator('#session-title').count(), 0, 'no stale session facts');
  assert.deepEqual(errors, []);
}

export async function longOutputAndExitWhileAttached(t: TestContext, f: Fixture): Promise<void> {
  const agent = await agentSession(f);
  t.after(() => agent.close());
  // About 900 KB of history in one burst (within the server's 1 MiB retention), already ended.
  const N = 150_000;
  await agent.start('long', ['seq', '1', String(N)]);
  const { page, errors } = await signedIn(t, f);
  await page.locator(`tr[data-session="${agent.sessionId}"]`).waitFor();
  await openSession(page, agent.sessionId);
  await page.locator('tr[data-process="long"] [data-col="state"]', { hasText: 'exit 0' }).waitFor({ timeout: 20_000 });
  await page.locator('tr[data-process="long"] button', { hasText: 'long' }).click();
  const out = page.locator('[data-testid="pipe-output"]');
  // Written a frame at a time: a page that appended chunk by chunk froze here for over a minute.
  await out.filter({ hasText: new RegExp(`(^|\\s)${N}\\s*$`) }).waitFor({ timeout: 30_000 });
  const text = await textOf(out);
  assert.ok(text.startsWith('1\n2\n3\n'), 'from the first line');
  assert.equal(text.split('\n').filter((l) => l !== '').length, N, 'every line once');
  const atEnd = await out.evaluate((el) => el.scrollTop + el.clientHeight >= el.scrollHeight - 8);
  assert.ok(atEnd, 'the view follows the newest output');

  // A PTY that exits while the console is attached interactively: the terminal keeps its output, typing ends.
  await page.getByRole('button', { name: 'Start shell' }).click();
  await page.getByRole('button', { name: 'Interactive: on' }).waitFor();
  await waitForTerminal(page, /[$#]\s*$/);
  await page.keyboard.type('echo bye-$((40+2)); exit 3\n');
  await page.locator('[data-testid="stream-status"]', { hasText: 'exit 3' }).waitFor({ timeout: 15_000 });
  await page.locator('.xterm-rows', { hasText: 'bye-42' }).waitFor();
  const toggle = page.getByRole('button', { name: 'Ended' });
  assert.equal(await toggle.isDisabled(), true);
  assert.equal(await toggle.getAttribute('aria-pressed'), 'false');
  assert.deepEqual(errors, []);
}
