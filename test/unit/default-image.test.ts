/**
 * Image pulls on a stand-in engine (the real one, with a registry: test/docker/image-pull.test.ts;
 * the default image at boot: test/boot/): DefaultImage's wording and state changes, and ImagePulls'
 * one pull per image, its progress to every waiter and a failure reported inside the stream.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import type Docker from 'dockerode';
import { DefaultImage, ImagePulls, SESSION_IMAGE } from '../../src/backends/docker/engine/image-pull.ts';
import { asTenantId } from '../../src/ids.ts';
import type { ImagePull } from '../../src/protocol/index.ts';

interface Logged {
  readonly msg: string | undefined;
  readonly obj: object;
}

function engine(opts: { present: () => boolean; pull: () => Promise<NodeJS.ReadableStream> }): Docker {
  const notFound = Object.assign(new Error('(HTTP code 404) no such image'), { statusCode: 404 });
  return {
    getImage: () => ({ inspect: async () => (opts.present() ? {} : Promise.reject(notFound)) }),
    pull: opts.pull,
    modem: {
      followProgress(stream: NodeJS.ReadableStream, done: (err: Error | null) => void, progress: (e: object) => void) {
        stream.on('data', (line: Buffer) => progress(JSON.parse(String(line)) as object));
        stream.on('end', () => done(null));
        stream.on('error', (err: Error) => done(err));
      },
    },
  } as unknown as Docker;
}

function recorder(): {
  log: {
    info: (o: object, m?: string) => void;
    warn: (o: object, m?: string) => void;
    error: () => void;
    debug: () => void;
  };
  lines: Logged[];
} {
  const lines: Logged[] = [];
  const add = (obj: object, msg?: string): void => void lines.push({ obj, msg });
  return { log: { info: add, warn: add, error: () => undefined, debug: () => undefined }, lines };
}

test('the default session image, missing and not pullable: the reason names the build script', async () => {
  const { log, lines } = recorder();
  const docker = engine({
    present: () => false,
    pull: () => Promise.reject(new Error('getaddrinfo ENOTFOUND registry')),
  });
  const d = new DefaultImage(docker, new ImagePulls(docker, log), SESSION_IMAGE, log, 1000);
  assert.equal(await d.notReadyReason(), `default image ${SESSION_IMAGE} is missing locally; pulling it`);
  await d.settled();
  const reason = await d.notReadyReason();
  assert.match(
    reason ?? '',
    /is missing and cannot be pulled \(pull exec-server-session:latest: getaddrinfo ENOTFOUND registry\); build it with: bash scripts\/build-session-image\.sh/,
  );
  assert.ok(
    lines.some((l) => l.msg === reason),
    'the failure is logged once, as it is reported',
  );
});

test('a pullable image is pulled once, with its progress, then ready', async () => {
  const { log, lines } = recorder();
  let present = false;
  let pulls = 0;
  const stream = new PassThrough();
  const docker = engine({
    present: () => present,
    pull: async () => {
      pulls++;
      return stream;
    },
  });
  const d = new DefaultImage(docker, new ImagePulls(docker, log), 'example/agent:1', log, 1000);
  assert.match((await d.notReadyReason()) ?? '', /missing locally; pulling it/);
  assert.match((await d.notReadyReason()) ?? '', /is being pulled/);
  stream.write(
    JSON.stringify({ status: 'Downloading', id: 'l1', progressDetail: { current: 1_000_000, total: 2_000_000 } }),
  );
  stream.write(JSON.stringify({ status: 'Pull complete', id: 'l1' }));
  present = true;
  stream.end();
  await d.settled();
  assert.equal(await d.notReadyReason(), undefined);
  assert.equal(pulls, 1);
  const done = lines.find((l) => l.msg === 'pulled image');
  assert.deepEqual(done?.obj, { image: 'example/agent:1', progress: '2.0 of 2.0 MB, 1 of 1 layers' });
});

test('ImagePulls: one pull per image; every waiter hears it at once, then bounded, then its last word', async (t) => {
  // The clock moves only when the test says so: the 500 ms bound is checked, not raced.
  t.mock.timers.enable({ apis: ['Date'], now: 0 });
  const { log } = recorder();
  const stream = new PassThrough();
  let pulls = 0;
  const docker = engine({
    present: () => false,
    pull: async () => {
      pulls++;
      return stream;
    },
  });
  const images = new ImagePulls(docker, log);
  const heard: [ImagePull[], ImagePull[]] = [[], []];
  const alice = asTenantId('alice');
  const first = images.pull('example/tool:1', { tenant: alice, onProgress: (p) => heard[0].push(p) });
  const second = images.pull('example/tool:1', { onProgress: (p) => heard[1].push(p) });
  await new Promise((r) => setImmediate(r));
  assert.equal(pulls, 1, 'the second waiter joined the pull in flight');
  assert.deepEqual(
    images.list(alice).map((p) => p.image),
    ['example/tool:1'],
  );
  assert.deepEqual(images.list(asTenantId('bob')), [], "another tenant's pulls are not listed");
  // A burst of events inside 500 ms is one notification at most (here none: the first was just sent).
  for (let i = 1; i <= 5; i++)
    stream.write(
      JSON.stringify({ status: 'Downloading', id: 'l1', progressDetail: { current: i * 100, total: 1000 } }),
    );
  await new Promise((r) => setImmediate(r));
  t.mock.timers.tick(550);
  stream.write(JSON.stringify({ status: 'Downloading', id: 'l1', progressDetail: { current: 900, total: 1000 } }));
  stream.write(JSON.stringify({ status: 'Pull complete', id: 'l1' }));
  stream.end();
  await Promise.all([first, second]);
  for (const h of heard) {
    assert.deepEqual(
      h.map((p) => [p.phase, p.currentBytes, p.totalBytes]),
      [
        ['pulling', 0, 0],
        ['pulling', 900, 1000],
        ['pulled', 1000, 1000],
      ],
    );
  }
  assert.deepEqual(images.list(alice), [], 'an ended pull is no longer listed');
});

test('ImagePulls: a failure inside the progress stream fails the pull, naming the image and the reason', async () => {
  const { log } = recorder();
  const stream = new PassThrough();
  const images = new ImagePulls(engine({ present: () => false, pull: async () => stream }), log);
  const heard: ImagePull[] = [];
  const pull = images.pull('example/tool:2', { onProgress: (p) => heard.push(p) });
  stream.write(JSON.stringify({ status: 'Pulling fs layer', id: 'l1' }));
  stream.write(JSON.stringify({ errorDetail: { message: 'unexpected EOF' }, error: 'unexpected EOF' }));
  stream.end();
  await assert.rejects(pull, (err: Error & { code?: string }) => {
    assert.equal(err.code, 'EXEC_ERR_NOT_FOUND');
    assert.match(err.message, /image example\/tool:2 not found locally and cannot be pulled: .*unexpected EOF/);
    return true;
  });
  assert.equal(heard.at(-1)?.phase, 'failed');
  assert.match(heard.at(-1)?.error ?? '', /unexpected EOF/);
});
