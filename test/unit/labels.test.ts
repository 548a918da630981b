/** Container labels (src/backends/docker/container/labels.ts): user labels round-trip under their prefix. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LABEL, readUserLabels, USER_LABEL_PREFIX, userLabels } from '../../src/backends/docker/container/labels.ts';

test('user labels get the prefix, and only prefixed labels are read back', () => {
  const labels = userLabels({ team: 'x', 'a.b': 'y' });
  assert.deepEqual(labels, { 'exec-server.label.team': 'x', 'exec-server.label.a.b': 'y' });
  assert.deepEqual(readUserLabels({ ...labels, [LABEL.sessionId]: 's1', other: 'z' }), { team: 'x', 'a.b': 'y' });
  assert.deepEqual(readUserLabels(undefined), {});
  assert.deepEqual(userLabels({}), {});
});

test('every label the server finds its objects by is distinct and namespaced', () => {
  const names = Object.values(LABEL);
  assert.equal(new Set(names).size, names.length);
  for (const n of names) assert.match(n, /^exec-server\./);
  for (const n of names) assert.ok(!n.startsWith(USER_LABEL_PREFIX), n);
});
