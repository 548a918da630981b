/** A child's environment (src/processes/environment.ts): Codex's envPolicy rules and the HOME fallback. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildEnvironment, withHome } from '../../src/processes/environment.ts';

const base = { PATH: '/bin', HOME: '/root', API_KEY: 'k', GITHUB_TOKEN: 't', my_secret: 's', LANG: 'C', USER: 'u' };

test('without a policy: the start env as it is, plus PATH', () => {
  assert.deepEqual(buildEnvironment(base, undefined, { A: '1' }), { PATH: '/bin', A: '1' });
  assert.deepEqual(buildEnvironment({}, undefined, undefined), {});
});

test('inherit all drops secret-looking names (case-insensitive) unless told not to', () => {
  assert.deepEqual(buildEnvironment(base, {}, undefined), { PATH: '/bin', HOME: '/root', LANG: 'C', USER: 'u' });
  assert.deepEqual(buildEnvironment(base, { ignoreDefaultExcludes: true }, undefined), base);
});

test('inherit core keeps only the core names; none starts empty', () => {
  assert.deepEqual(buildEnvironment(base, { inherit: 'core' }, undefined), { PATH: '/bin', HOME: '/root', USER: 'u' });
  assert.deepEqual(buildEnvironment(base, { inherit: 'none', set: { X: '1' } }, undefined), { X: '1' });
});

test('exclude globs, then set, then includeOnly; the start env is laid over last', () => {
  const env = buildEnvironment(
    base,
    { exclude: ['L?NG', 'US*'], set: { EXTRA: 'e', PATH: '/usr/bin' }, includeOnly: ['PATH', 'EXTRA', 'HOME'] },
    { HOME: '/w', NEW: 'n' },
  );
  assert.deepEqual(env, { PATH: '/usr/bin', EXTRA: 'e', HOME: '/w', NEW: 'n' });
  assert.deepEqual(buildEnvironment({ 'A.B': '1', AXB: '2' }, { exclude: ['A.B'] }, undefined), { AXB: '2' });
});

test('withHome: the env keeps its HOME; a missing or empty one becomes the session home', () => {
  const env = { HOME: '/mine' };
  assert.equal(withHome(env, '/home/s'), env);
  assert.deepEqual(withHome({ A: '1' }, '/home/s'), { A: '1', HOME: '/home/s' });
  assert.deepEqual(withHome({ HOME: '' }, '/home/s'), { HOME: '/home/s' });
});
