/**
 * The console's Share button in headless Chromium (local backend): a read link made in one
 * browser opens that session alone in another (no sign-in, the token out of the address bar
 * and never in a request URL), and revoking it from the first ends it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { SessionInfo } from '../../src/protocol/index.ts';
import { browserTestOptions, pageErrors } from './browser.ts';
import { api, type Fixture, openSession, setUp, signedIn, tearDown } from './scenario.ts';

const opts = browserTestOptions(90_000);

describe('console: share a session', { skip: opts.skip }, () => {
  let f: Fixture | undefined;
  before(async () => {
    f = await setUp('local');
  });
  after(() => tearDown(f));

  test('a read link opens the one session in another browser; revoke ends it', opts, async (t) => {
    const fx = f as Fixture;
    const created = await api<SessionInfo>(fx, 'POST', '/v1/sessions', {});
    const id = created.body.sessionId;
    const { page, errors } = await signedIn(t, fx);
    await page.reload();
    await page.getByRole('heading', { name: 'Sessions' }).waitFor();
    await openSession(page, id);
    await page.getByRole('button', { name: 'Share' }).click();
    await page.locator('#share-access').selectOption('read');
    await page.getByRole('button', { name: 'Create link' }).click();
    const link = await page.locator('#share-link').inputValue();
    assert.match(link, new RegExp(`#/share/${id}/est1\\.`));
    const token = decodeURIComponent(link.split('/').pop() ?? '');

    const other = await fx.browser.newContext({ viewport: { width: 1280, height: 800 } });
    t.after(() => other.close());
    const viewer = await other.newPage();
    const viewerErrors = pageErrors(viewer);
    const urls: string[] = [];
    viewer.on('request', (r) => urls.push(r.url()));
    await viewer.goto(link);
    await viewer.locator('#session-title').waitFor();
    await viewer.locator('[data-testid="socket"]', { hasText: 'live' }).waitFor();
    assert.ok(!viewer.url().includes('est1.'), `the token left the address bar: ${viewer.url()}`);
    assert.ok(viewer.url().endsWith(`#/sessions/${id}`));
    assert.ok(!urls.some((u) => u.includes('est1.')), 'no request URL carries the token');
    assert.equal(await viewer.getByText('shared session').count(), 1);
    assert.equal(await viewer.getByRole('button', { name: 'Share' }).isDisabled(), true);

    await page.getByRole('button', { name: 'Revoke link' }).click();
    await page.getByRole('button', { name: 'Create link' }).waitFor();
    const after = await api<{ code: string }>(fx, 'GET', `/v1/sessions/${id}`, undefined, token);
    assert.equal(after.status, 401);
    assert.equal(after.body.code, 'EXEC_ERR_TOKEN_REVOKED');
    assert.deepEqual(errors, []);
    assert.deepEqual(viewerErrors, []);
  });
});
