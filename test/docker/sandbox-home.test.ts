/** A sandboxed (container-user) attempt that inherits the image's HOME=/root gets a home it can read. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { serverFor, sessionFor } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';

test(
  "container-user: HOME falls back to the user's passwd home; login shells start cleanly",
  dockerTestOptions,
  async (t) => {
    const server = await serverFor(t, { backend: 'docker' });
    const s = await sessionFor(t, server.url);
    const r = await s.run('home', ['/bin/bash', '-lc', 'echo "home=$HOME"; id -u'], { envPolicy: { inherit: 'all' } });
    assert.equal(r.stderr, '');
    assert.equal(r.stdout, 'home=/home/sandbox\n1000\n');
    const root = await s.run('root', ['sh', '-c', 'echo "home=$HOME"'], {
      envPolicy: { inherit: 'all' },
      sandboxPermissions: 'require-escalated',
      approval: 'approved',
    });
    assert.equal(root.stdout, 'home=/root\n');
  },
);
