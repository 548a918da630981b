/** The console's end-to-end suite, one for each backend (console-local.test.ts, console-docker.test.ts). */
import { after, before, describe, test } from 'node:test';
import { browserTestOptions } from './browser.ts';
import { denyAndDeletedElsewhere, longOutputAndExitWhileAttached } from './scenario-edges.ts';
import {
  approveSandboxRetry,
  otherTenantSeesNothing,
  ptyTypeAndResize,
  setUp,
  signInAndList,
  snapshotAndDelete,
  streamAndResume,
  tearDown,
  type Fixture,
} from './scenario.ts';

/** Every console scenario against one server of `backend`, within `timeout` ms each. */
export function consoleSuite(backend: 'local' | 'docker', timeout: number, skip?: string): void {
  const opts = browserTestOptions(timeout, skip);
  describe(`console on the ${backend} backend`, { skip: opts.skip }, () => {
    let f: Fixture | undefined;
    before(async () => {
      f = await setUp(backend);
    });
    after(() => tearDown(f));
    const fx = (): Fixture => f as Fixture;

    test('sign in (a wrong token is refused), sessions with live resource use', opts, (t) => signInAndList(t, fx()));
    test('a streaming command, a dropped socket, output continues without a gap', opts, (t) =>
      streamAndResume(t, fx()),
    );
    test('PTY: read-only by default, start a shell, type and see the echo, resize follows the window', opts, (t) =>
      ptyTypeAndResize(t, fx()),
    );
    test('a pending sandbox retry approved from the console', opts, (t) => approveSandboxRetry(t, fx()));
    test(backend === 'docker' ? 'snapshot and delete' : 'snapshot (docker only) and delete', opts, (t) =>
      snapshotAndDelete(t, fx()),
    );
    test('a pending approval denied from the console; a session deleted elsewhere while shown', opts, (t) =>
      denyAndDeletedElsewhere(t, fx()),
    );
    test('long output in one burst, followed to the end; a PTY that exits while attached', opts, (t) =>
      longOutputAndExitWhileAttached(t, fx()),
    );
    test("another tenant's token sees nothing", opts, (t) => otherTenantSeesNothing(t, fx()));
  });
}
