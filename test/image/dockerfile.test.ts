/**
 * The Dockerfile and .dockerignore as text: the settings an operator relies on even where the
 * image is built elsewhere (server-image.test.ts builds nothing; it runs the image that
 * scripts/build-server-image.sh built from this Dockerfile).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const root = fileURLToPath(new URL('../../', import.meta.url));
const read = (path: string): string => readFileSync(join(root, path), 'utf8');

/** Instructions with continuation lines joined, comments and blank lines dropped. */
const instructions = read('Dockerfile')
  .replace(/\\\n/g, ' ')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l !== '' && !l.startsWith('#'));
const froms = instructions.filter((l) => /^FROM\s/i.test(l));
const runtimeStart = instructions.indexOf(froms[1] ?? '');
const builder = instructions.slice(0, runtimeStart);
const runtime = instructions.slice(runtimeStart);
const pkg = JSON.parse(read('package.json')) as { version: string };

/** `ARG NAME=default` of a stage, undefined when not declared. */
function argDefault(stage: readonly string[], name: string): string | undefined {
  const line = stage.find((l) => new RegExp(`^ARG\\s+${name}(=|$)`, 'i').test(l));
  if (line === undefined) return undefined;
  const value = line.replace(new RegExp(`^ARG\\s+${name}=?`, 'i'), '');
  return value.replace(/^"(.*)"$/, '$1');
}

test('the base image is a build argument defaulting to the public Node bookworm-slim image', () => {
  const globalArgs = instructions.slice(0, instructions.indexOf(froms[0] ?? ''));
  assert.match(argDefault(globalArgs, 'BASE_IMAGE') ?? '', /^node:\d+-bookworm-slim$/);
  assert.equal(froms.length, 2, 'a builder and a runtime stage');
  assert.match(froms[0] ?? '', /^FROM \$\{BASE_IMAGE\} AS builder$/i);
  assert.match(froms[1] ?? '', /^FROM \$\{BASE_IMAGE\}$/i);
});

test('the builder installs production dependencies and fails on a missing native helper', () => {
  const text = builder.join('\n');
  assert.match(text, /apt-get install[^\n]*\bgcc\b[^\n]*libc6-dev/);
  assert.match(text, /npm ci --omit=dev\b/);
  assert.match(text, /sh scripts\/build-native\.sh/);
  assert.match(text, /for src in native\/\*\.c[^\n]*exit 1/, 'every native/*.c must give a build/ binary');
  assert.match(text, /grep -q '\^int main\(' "\$src" \|\| continue/, 'sources without main() are included, not built');
  assert.match(
    text,
    /node web\/build\.mjs && test -f build\/console\/index\.html/,
    'the console bundle, or a failed build',
  );
  assert.match(text, /node scripts\/build-dist-strip\.mjs && test -f dist\/main\.js/, 'the server JavaScript');
  // package*.json before the sources, so a source change reuses the dependency layer.
  const copyLock = builder.findIndex((l) => /^COPY package\.json package-lock\.json/.test(l));
  const npmCi = builder.findIndex((l) => /npm ci/.test(l));
  const copyNative = builder.findIndex((l) => /^COPY native\b/.test(l));
  assert.ok(copyLock >= 0 && copyLock < npmCi && npmCi < copyNative);
});

test('the runtime stage: sandbox and init packages, the builder output, no build tools', () => {
  const text = runtime.join('\n');
  assert.match(text, /apt-get install[^\n]*bubblewrap[^\n]*ca-certificates[^\n]*tini/);
  assert.doesNotMatch(text, /\b(gcc|g\+\+|make|python3)\b/);
  assert.match(text, /COPY --from=builder \/app\/node_modules/);
  assert.match(text, /COPY --from=builder \/app\/build/);
  // The built JavaScript, which bin/exec-server.js runs under NODE_ENV=production.
  assert.match(text, /COPY --from=builder \/app\/dist/);
  assert.match(text, /ENV NODE_ENV=production/);
  assert.doesNotMatch(text, /npm (ci|install)/);
});

test("non-root user, the chart's uid, tini as PID 1, the serve command", () => {
  const users = runtime.filter((l) => /^USER\s/i.test(l));
  assert.equal(users.length, 1);
  const user = (users[0] ?? '').replace(/^USER\s+/i, '');
  assert.match(user, /^\d+:\d+$/, 'numeric, so runAsNonRoot can verify it');
  assert.notEqual(user.split(':')[0], '0');
  const values = parse(read('helm/exec-server/values.yaml')) as {
    securityContext: { runAsUser: number; runAsGroup: number };
  };
  assert.equal(
    user,
    `${values.securityContext.runAsUser}:${values.securityContext.runAsGroup}`,
    'the chart runs the image user',
  );
  assert.match(runtime.join('\n'), new RegExp(`useradd [^\\n]*--uid ${values.securityContext.runAsUser}\\b`));
  const entrypoint = runtime.find((l) => /^ENTRYPOINT\s/i.test(l)) ?? '';
  assert.deepEqual(JSON.parse(entrypoint.replace(/^ENTRYPOINT\s+/i, '')), [
    '/usr/bin/tini',
    '--',
    'node',
    '--max-semi-space-size=2',
    'bin/exec-server.js',
  ]);
  const cmd = runtime.find((l) => /^CMD\s/i.test(l)) ?? '';
  assert.deepEqual(JSON.parse(cmd.replace(/^CMD\s+/i, '')), ['serve', '--listen', 'ws://0.0.0.0:8765']);
});

test('OCI labels: version (package.json by default), revision and source as build arguments', () => {
  assert.equal(argDefault(runtime, 'VERSION'), pkg.version, 'the default VERSION follows package.json');
  assert.equal(argDefault(runtime, 'REVISION'), 'unknown');
  assert.equal(argDefault(runtime, 'SOURCE'), '');
  const label = runtime.find((l) => /^LABEL\s/i.test(l)) ?? '';
  for (const [key, value] of [
    ['version', '${VERSION}'],
    ['revision', '${REVISION}'],
    ['source', '${SOURCE}'],
    ['title', 'exec-server'],
    ['licenses', 'Apache-2.0'],
  ] as const) {
    assert.ok(label.includes(`org.opencontainers.image.${key}="${value}"`), `label ${key}`);
  }
  // The build arguments come after every RUN: a new revision rebuilds no layer.
  const lastRun = Math.max(...runtime.map((l, i) => (/^RUN\s/i.test(l) ? i : -1)));
  const firstArg = runtime.findIndex((l) => /^ARG\s/i.test(l));
  assert.ok(firstArg > lastRun);
});

test(".dockerignore keeps the repository's large and private parts out of the context", () => {
  const ignored = new Set(
    read('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#')),
  );
  for (const entry of ['.git', 'node_modules', 'build', 'test', 'bench', '*.log', '.env'])
    assert.ok(ignored.has(entry), `${entry} is ignored`);
  // Everything the Dockerfile copies from the context must stay in it.
  const copied = instructions
    .filter((l) => /^COPY\s/i.test(l) && !/--from=/i.test(l))
    .flatMap((l) =>
      l
        .replace(/^COPY\s+/i, '')
        .split(/\s+/)
        .slice(0, -1),
    )
    .map((p) => p.replace(/\/$/, ''));
  assert.ok(copied.length >= 5, `found ${copied.length} copied paths`);
  for (const path of copied) {
    const top = path.split('/')[0] ?? '';
    assert.ok(!ignored.has(path) && !ignored.has(top), `${path} is copied but ignored`);
  }
});

test('every native source is a helper that build-native.sh builds, or is included by one', () => {
  const buildScript = read('scripts/build-native.sh');
  const sources = readdirSync(join(root, 'native')).filter((f) => f.endsWith('.c'));
  const texts = new Map(sources.map((f) => [f, read(`native/${f}`)]));
  for (const [file, text] of texts) {
    if (/^int main\(/m.test(text)) {
      assert.ok(
        buildScript.includes(file.replace(/\.c$/, '')),
        `${file} has a main() but build-native.sh does not build it`,
      );
    } else {
      const includers = [...texts].filter(([, t]) => t.includes(`#include "${file}"`)).map(([f]) => f);
      assert.ok(includers.length > 0, `${file} has no main() and no native source includes it`);
    }
  }
});
