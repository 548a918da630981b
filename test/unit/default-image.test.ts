/** DefaultImage's wording and state changes, on a stand-in engine (the real one: test/boot/). */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import type Docker from 'dockerode';
import { DefaultImage, SESSION_IMAGE } from '../../src/backends/docker/image-pull.ts';

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
  const d = new DefaultImage(
    engine({ present: () => false, pull: () => Promise.reject(new Error('getaddrinfo ENOTFOUND registry')) }),
    SESSION_IMAGE,
    log,
    1000,
  );
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
  const d = new DefaultImage(
    engine({
      present: () => present,
      pull: async () => {
        pulls++;
        return stream;
      },
    }),
    'example/agent:1',
    log,
    1000,
  );
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
  assert.deepEqual(done?.obj, { image: 'example/agent:1', progress: '2.0 of 2.0 MB, 1 layers' });
});
