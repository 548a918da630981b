/**
 * The console end to end, in headless Chromium against a real server (one backend per test
 * file): sign in, sessions with resource use, a streaming command, a dropped socket resumed
 * without a gap, a PTY typed into and resized, a sandbox retry approved, snapshot (docker),
 * delete, and another tenant that sees nothing. Screenshots of the main views are taken on the
 * way (screenshot() in browser.ts says where they go).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import type { TestContext } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { sleep, startServer, TestSession, type BackendKind, type TestServer } from '../support/harness.ts';
import type { SessionInfo, SnapshotInfo } from '../../src/protocol/index.ts';
import { requestJson, type Answer, type ExecAnswer } from '../http/helpers.ts';
import { ensureConsoleBuilt, launch, pageErrors, screenshot, terminalText, textOf } from './browser.ts';

const ALICE = 'tok-alice-7f3a';
const BOB = 'tok-bob-91c2';
export const TOKEN_FLAGS = ['--tokens', `alice:${ALICE},bob:${BOB}`];

export interface Fixture {
  readonly kind: BackendKind;
  readonly server: TestServer;
  readonly browser: Browser;
}

export async function setUp(kind: BackendKind): Promise<Fixture> {
  await ensureConsoleBuilt();
  const server = await startServer({ backend: kind, flags: TOKEN_FLAGS });
  const browser = await launch();
  return { kind, server, browser };
}

export async function tearDown(f: Fixture | undefined): Promise<void> {
  await f?.browser.close();
  await f?.server.close();
}

export function api<T = unknown>(
  f: Fixture,
  method: string,
  path: string,
  body?: unknown,
  token = ALICE,
): Promise<Answer<T>> {
  return requestJson<T>(`${f.server.httpUrl}${path}`, method, body, token);
}

/** A fresh page signed in as `token` (by keyboard: the token field has focus, Enter submits). */
export async function signedIn(t: TestContext, f: Fixture, token = ALICE): Promise<{ page: Page; errors: string[] }> {
  const context = await f.browser.newContext({ viewport: { width: 1440, height: 900 } });
  t.after(() => context.close());
  const page = await context.newPage();
  const errors = pageErrors(page);
  await page.goto(`${f.server.httpUrl}/console/`);
  // The token field takes the focus by itself (autofocus); type once it has.
  await page.waitForFunction(() => document.activeElement?.id === 'token');
  await page.keyboard.type(token);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Sessions' }).waitFor();
  return { page, errors };
}

export async function openSession(page: Page, sessionId: string): Promise<void> {
  const link = page.locator(`tr[data-session="${sessionId}"] a`);
  await link.focus();
  await page.keyboard.press('Enter');
  await page.locator('#session-title').waitFor();
  await page.locator('[data-testid="socket"]', { hasText: 'live' }).waitFor();
}

/** Waits until the terminal's visible text matches `pattern`. */
export async function waitForTerminal(page: Page, pattern: RegExp, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let text = '';
  while (Date.now() < deadline) {
    text = (await terminalText(page)).replace(/\s+$/, '');
    if (pattern.test(text)) return;
    await sleep(100);
  }
  throw new Error(`the terminal never showed ${pattern}; it shows:\n${text}`);
}

export async function agentSession(f: Fixture, spec: Record<string, unknown> = {}): Promise<TestSession> {
  return TestSession.open(f.server.url, { session: spec }, { token: ALICE });
}

export async function signInAndList(t: TestContext, f: Fixture): Promise<void> {
  const context = await f.browser.newContext({ viewport: { width: 1440, height: 900 } });
  t.after(() => context.close());
  const page = await context.newPage();
  const errors = pageErrors(page);
  const res = await page.goto(`${f.server.httpUrl}/console/`);
  assert.match(res?.headers()['content-security-policy'] ?? '', /frame-ancestors 'none'/);
  await page.locator('#token').fill('not-a-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'not accepted' }).waitFor();
  await screenshot(page, `${f.kind}-sign-in-error`);
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'a refused token is not kept');

  const agent = await agentSession(f, { labels: { purpose: 'list' } });
  t.after(() => agent.close());
  await agent.start('busy', ['sh', '-c', 'sleep 60 & while :; do :; done']);
  await page.locator('#token').fill(ALICE);
  await page.keyboard.press('Enter');
  const row = page.locator(`tr[data-session="${agent.sessionId}"]`);
  await row.waitFor();
  assert.ok(!page.url().includes(ALICE), 'the token is not in the URL');
  assert.equal(await page.evaluate(() => document.cookie), '', 'no cookie holds the token');
  assert.equal(await page.evaluate(() => Object.values(sessionStorage).join()), ALICE, 'kept in session storage');
  // CPU needs two samples; the list refreshes every 2 s.
  await row.locator('[data-col="cpu"]', { hasText: /\d%/ }).waitFor({ timeout: 15_000 });
  const pids = Number((await textOf(row.locator('[data-col="pids"]'))).split('/')[0]);
  assert.ok(pids >= 2, `pids shown: ${pids}`);
  assert.match(await textOf(row.locator('[data-col="memory"]')), /(KiB|MiB|GiB)/);
  await screenshot(page, `${f.kind}-sessions`);
  await agent.request('process/terminate', { processId: 'busy' });
  // A token the server no longer accepts (it restarted with other tokens) signs the tab out.
  await page.evaluate(() => sessionStorage.setItem('exec-server.console.token', 'revoked-token'));
  await page.reload();
  await page.getByRole('alert').filter({ hasText: 'no longer accepts this token' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  assert.deepEqual(errors, []);
}

export async function streamAndResume(t: TestContext, f: Fixture): Promise<void> {
  const agent = await agentSession(f);
  t.after(() => agent.close());
  const { page, errors } = await signedIn(t, f);
  await page.locator(`tr[data-session="${agent.sessionId}"]`).waitFor();
  await openSession(page, agent.sessionId);

  const N = 400;
  // stdout and stderr are separate pipes with no order between them: the pause keeps the
  // stderr line ahead of the last stdout line.
  await agent.start('stream', [
    'sh',
    '-c',
    `i=1; while [ $i -le ${N} ]; do echo line-$i; i=$((i+1)); sleep 0.02; done; echo to-stderr >&2; sleep 0.3; echo done`,
  ]);
  await page.locator('tr[data-process="stream"] button', { hasText: 'stream' }).click();
  const out = page.locator('[data-testid="pipe-output"]');
  await out.filter({ hasText: 'line-60\n' }).waitFor({ timeout: 20_000 });

  // Drop the console's socket from the server side, as a network failure would.
  const consoles = [...(f.server.app.websocketServer?.clients ?? [])].filter((ws) => ws.protocol === 'exec-server');
  assert.equal(consoles.length, 1, 'one console connection');
  consoles[0]?.terminate();
  await page.locator('[data-testid="socket"]', { hasText: 'reconnected' }).waitFor({ timeout: 20_000 });
  await out.filter({ hasText: 'done' }).waitFor({ timeout: 30_000 });
  const status = await textOf(page.locator('[data-testid="stream-status"]'));
  assert.match(status, /exit 0/);

  const text = await textOf(out);
  const expected = [...Array.from({ length: N }, (_, i) => `line-${i + 1}`), 'to-stderr', 'done'].join('\n');
  assert.equal(text.trim(), expected, 'every line once, in order, across the reconnect');
  assert.equal(await textOf(out.locator('.out-stderr')), 'to-stderr\n', 'stderr is told apart');
  await screenshot(page, `${f.kind}-pipe-output`);
  assert.deepEqual(errors, []);
}

export async function ptyTypeAndResize(t: TestContext, f: Fixture): Promise<void> {
  const agent = await agentSession(f);
  t.after(() => agent.close());
  // A PTY the agent started: the console attaches read-only first.
  await agent.start('agent-pty', ['sh', '-c', 'echo agent-pty-ready; exec cat'], { tty: true });
  const { page, errors } = await signedIn(t, f);
  await page.locator(`tr[data-session="${agent.sessionId}"]`).waitFor();
  await openSession(page, agent.sessionId);
  await page.locator('tr[data-process="agent-pty"] button', { hasText: 'agent-pty' }).click();
  await page.locator('.xterm-rows', { hasText: 'agent-pty-ready' }).waitFor();
  const toggle = page.getByRole('button', { name: 'Read-only' });
  assert.equal(await toggle.getAttribute('aria-pressed'), 'false', 'read-only by default');
  await page.locator('[data-testid="terminal"]').click();
  await page.keyboard.type('typed-while-read-only');
  await sleep(500);
  assert.doesNotMatch(await terminalText(page), /typed-while-read-only/, 'a read-only terminal sends nothing');

  // Start a shell: interactive at once.
  // By keyboard, as a person without a mouse would.
  await page.getByRole('button', { name: 'Start shell' }).focus();
  await page.keyboard.press('Enter');
  await page.getByRole('button', { name: 'Interactive: on' }).waitFor();
  // Type once the shell has printed its prompt (a `$` or `#` on the last line).
  await waitForTerminal(page, /[$#]\s*$/);
  await page.keyboard.type('echo console-$((6*7))\n');
  await page.locator('.xterm-rows', { hasText: 'console-42' }).waitFor({ timeout: 15_000 });

  const size = async (): Promise<[number, number]> => {
    const marker = `size-${randomUUID().slice(0, 6)}`;
    await page.keyboard.type(`echo ${marker} $(stty size)\n`);
    const line = page.locator('.xterm-rows div', { hasText: new RegExp(`^${marker} \\d+ \\d+`) });
    await line.first().waitFor({ timeout: 15_000 });
    const [, rows, cols] = (await textOf(line.first()))
      .replace(/\u00a0/g, ' ')
      .trim()
      .split(/\s+/);
    return [Number(rows), Number(cols)];
  };
  const domRows = (): Promise<number> => page.locator('.xterm-rows > div').count();
  const before = await size();
  assert.equal(before[0], await domRows(), 'the PTY has the rows the terminal shows');
  await screenshot(page, `${f.kind}-terminal`);
  await page.setViewportSize({ width: 1100, height: 700 });
  await sleep(800);
  const after = await size();
  assert.notDeepEqual(after, before, 'the window resize reached the PTY');
  assert.equal(after[0], await domRows(), 'rows follow the terminal');
  // Narrower than 1100 px the layout stacks, so the terminal gets wider: the cols change either way.
  assert.notEqual(after[1], before[1], `cols follow the terminal: ${before[1]} -> ${after[1]}`);
  assert.deepEqual(errors, []);
}

export async function approveSandboxRetry(t: TestContext, f: Fixture): Promise<void> {
  const created = await api<SessionInfo>(f, 'POST', '/v1/sessions', { approvalPolicy: 'on-failure' });
  assert.equal(created.status, 201);
  const sessionId = created.body.sessionId;
  // A plain sh, not a login bash: the denial must come within the 150 ms window (docs/protocol.md).
  // Outside the writable roots: denied by the sandbox (read-only bind / non-root user), allowed once approved.
  const target =
    f.kind === 'local' ? `/var/tmp/exec-server-console-${randomUUID().slice(0, 8)}` : '/etc/console-approved';
  t.after(() => {
    if (f.kind === 'local') rmSync(target, { force: true });
  });
  const { page, errors } = await signedIn(t, f);
  await page.locator(`tr[data-session="${sessionId}"]`).waitFor();
  await openSession(page, sessionId);
  // The server treats only an attempt that ends within 150 ms of running as a possible denial;
  // on a loaded machine a container exec can take longer than that, and then the command's
  // failure is simply its result. Such a run is set up again (bounded), never counted as a pass.
  let call: Answer<ExecAnswer> | undefined;
  for (let attempt = 0; attempt < 4 && call?.status !== 202; attempt++) {
    call = await api<ExecAnswer>(f, 'POST', `/v1/sessions/${sessionId}/exec_command`, {
      cmd: `echo approved-write > ${target} && cat ${target}`,
      shell: '/bin/sh',
      login: false,
      yield_time_ms: 5000,
    });
    if (call.status === 200) assert.notEqual(call.body.exit_code, 0, 'outside the sandbox only after approval');
  }
  assert.equal(call?.status, 202, JSON.stringify(call?.body));
  assert.equal(call.body.approval?.purpose, 'sandbox-retry');
  const item = page.locator(`[data-approval="${call.body.approval_id}"]`);
  await item.waitFor({ timeout: 10_000 });
  assert.match(await textOf(item), /sandbox retry/);
  await screenshot(page, `${f.kind}-approval`);
  await item.getByRole('button', { name: 'Approve' }).click();
  await page
    .getByRole('status')
    .filter({ hasText: /Approved: .* exited with 0/ })
    .waitFor({ timeout: 20_000 });
  await item.waitFor({ state: 'detached' });
  if (f.kind === 'local') assert.ok(existsSync(target), 'the approved retry ran without the sandbox');
  assert.deepEqual(errors, []);
}

export async function snapshotAndDelete(t: TestContext, f: Fixture): Promise<void> {
  const created = await api<SessionInfo>(f, 'POST', '/v1/sessions', {});
  const sessionId = created.body.sessionId;
  const { page, errors } = await signedIn(t, f);
  await page.locator(`tr[data-session="${sessionId}"]`).waitFor();
  await openSession(page, sessionId);
  const snap = page.getByRole('button', { name: 'Snapshot' });
  if (f.kind === 'docker') {
    await snap.click();
    const notice = page.getByRole('status').filter({ hasText: /Snapshot .* created/ });
    await notice.waitFor({ timeout: 60_000 });
    const snapshots = await api<{ snapshots: SnapshotInfo[] }>(f, 'GET', '/v1/snapshots');
    const mine = snapshots.body.snapshots.filter((s) => s.sessionId === sessionId);
    assert.equal(mine.length, 1, 'one snapshot of this session');
    assert.match(await textOf(notice), new RegExp(mine[0]!.snapshotId.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
    t.after(() => api(f, 'DELETE', `/v1/snapshots/${encodeURIComponent(mine[0]!.snapshotId)}`));
  } else {
    assert.equal(await snap.isDisabled(), true, 'snapshots need the docker backend');
  }
  await page.getByRole('button', { name: 'Delete' }).click();
  await page.getByRole('dialog').waitFor();
  await screenshot(page, `${f.kind}-delete-dialog`);
  await page.getByRole('button', { name: 'Delete session' }).click();
  await page.getByRole('heading', { name: 'Sessions' }).waitFor();
  await page.locator(`tr[data-session="${sessionId}"]`).waitFor({ state: 'detached' });
  assert.equal((await api(f, 'GET', `/v1/sessions/${sessionId}`)).status, 404);
  assert.deepEqual(errors, []);
}

export async function otherTenantSeesNothing(t: TestContext, f: Fixture): Promise<void> {
  const agent = await agentSession(f);
  t.after(() => agent.close());
  const { page, errors } = await signedIn(t, f, BOB);
  await page.getByText('No sessions yet').waitFor();
  await screenshot(page, `${f.kind}-empty`);
  assert.equal(await page.locator('tr[data-session]').count(), 0);
  await page.goto(`${f.server.httpUrl}/console/#/sessions/${agent.sessionId}`);
  await page
    .getByRole('alert')
    .filter({ hasText: /does not exist/ })
    .waitFor();
  assert.equal(await page.locator('[data-testid="socket"]').count(), 0);
  // Nor over the socket: bob's observer cannot attach to alice's session.
  await assert.rejects(
    TestSession.open(f.server.url, { resumeSessionId: agent.sessionId, observe: true }, { token: BOB }),
    /not found|EXEC_ERR_SESSION_NOT_FOUND/i,
  );
  assert.deepEqual(errors, []);
}
