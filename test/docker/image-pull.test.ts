/**
 * A session whose image is missing locally: the server pulls it from a registry (a real one,
 * in this process: test/support/registry.ts) and the connection that waits hears the pull's
 * progress (`session/imagePull`), the HTTP side sees it in `GET /v1/images/pulls`, the CLI
 * prints it, and a pull the registry refuses is a clear error at once.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { Compile } from 'typebox/compile';
import { ExecServerClient, type ImagePull } from '../../src/client/client.ts';
import { RpcError } from '../../src/client/rpc-connection.ts';
import { ImagePullSchema, RPC_NOTIFICATIONS } from '../../src/protocol/index.ts';
import { imageFrom, startRegistry, type RegistryImage, type TestRegistry } from '../support/registry.ts';
import { startServer, within, type TestServer } from '../support/harness.ts';
import { dockerTestOptions, engineReady, TEST_IMAGE } from './engine.ts';
import { mcpClient, textOf } from '../mcp/helpers.ts';

const run = promisify(execFile);
const notification = Compile(RPC_NOTIFICATIONS['session/imagePull']);
const listed = Compile(ImagePullSchema);
const docker = new Docker({ socketPath: '/var/run/docker.sock' });
/**
 * Random bytes on top of the test image: a layer the engine has never seen (the test image's
 * own layer may be "Already exists" from an earlier run), incompressible, so it takes its time.
 */
const EXTRA_BYTES = 3_000_000;
/** Per blob: the random layer takes about 3 s. */
const BYTES_PER_SECOND = 1_000_000;

let registry: TestRegistry;
let server: TestServer;
/** One image per repository, each with its own random layer (one repository per test that pulls). */
const served: Record<string, RegistryImage> = {};
const pulled: string[] = [];

/** `repository` under a tag nobody has pulled before. */
function freshImage(repository: string): string {
  const image = `${registry.host}/${repository}:t-${randomUUID().slice(0, 8)}`;
  pulled.push(image);
  return image;
}

before(async () => {
  if (!engineReady) return;
  for (const repository of ['exec-test/pull', 'exec-test/cli', 'exec-test/mcp'])
    served[repository] = await imageFrom(TEST_IMAGE, EXTRA_BYTES);
  // A manifest whose last layer (the random one, never seen by the engine) the registry lacks.
  const broken = await imageFrom(TEST_IMAGE, 100_000);
  served['exec-test/broken'] = { ...broken, blobs: new Map([...broken.blobs].slice(0, -1)) };
  registry = await startRegistry(served, BYTES_PER_SECOND);
  server = await startServer({ backend: 'docker' });
});

after(async () => {
  if (!engineReady) return;
  await server?.close();
  await registry?.close();
  for (const image of pulled)
    await docker
      .getImage(image)
      .remove()
      .catch(() => undefined);
});

test(
  'a missing image is pulled once for two waiting sessions, each hearing its progress; the session then runs',
  dockerTestOptions,
  async () => {
    const image = freshImage('exec-test/pull');
    const layerBytes = served['exec-test/pull']?.layerBytes ?? 0;
    const heard: [ImagePull[], ImagePull[]] = [[], []];
    const started = Date.now();
    const connect = (i: 0 | 1): Promise<ExecServerClient> =>
      ExecServerClient.connect(server.url, { session: { image }, onImagePull: (p) => heard[i].push(p) });
    const first = connect(0);
    // The HTTP side: the pull is listed while the creation waits for it.
    let inFlight: ImagePull | undefined;
    while (inFlight === undefined && Date.now() - started < 30_000) {
      inFlight = (await (await fetch(`${server.httpUrl}/v1/images/pulls`)).json()).pulls.find(
        (p: ImagePull) => p.image === image,
      );
      if (inFlight === undefined) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(inFlight?.phase, 'pulling', 'GET /v1/images/pulls lists the pull in flight');
    assert.ok(listed.Check(inFlight), JSON.stringify([...listed.Errors(inFlight)]));
    const second = connect(1);
    const clients = await within(Promise.all([first, second]), 120_000, 'the sessions waiting for the pull');
    const tookMs = Date.now() - started;
    try {
      for (const [i, pulls] of heard.entries()) {
        const last = pulls.at(-1);
        assert.ok(pulls.length >= 2, `waiter ${i} heard the pull: ${JSON.stringify(pulls)}`);
        assert.deepEqual(
          pulls.map((p) => p.phase),
          [...pulls.slice(0, -1).map(() => 'pulling'), 'pulled'],
          `waiter ${i}: progress, then one final word`,
        );
        for (const [j, p] of pulls.entries()) {
          assert.ok(notification.Check(p), JSON.stringify([...notification.Errors(p)]));
          assert.equal(p.image, image);
          if (j > 0) assert.ok(p.currentBytes >= (pulls[j - 1]?.currentBytes ?? 0), `waiter ${i}: bytes never go back`);
        }
        // The random layer at least was downloaded (the test image's may have been there already).
        assert.ok(
          (last?.totalBytes ?? 0) > EXTRA_BYTES && (last?.totalBytes ?? 0) <= layerBytes,
          `final figure ${last?.totalBytes} of at most ${layerBytes} layer bytes`,
        );
        assert.equal(last?.currentBytes, last?.totalBytes);
        assert.equal(last?.layersDone, last?.layers);
        // Bounded rate: at most one per 500 ms, plus the first and the last.
        assert.ok(pulls.length <= tookMs / 500 + 3, `waiter ${i}: ${pulls.length} notifications in ${tookMs} ms`);
      }
      const midway = heard[0].filter((p) => p.currentBytes > 0 && p.currentBytes < p.totalBytes);
      assert.ok(midway.length >= 1, `a notification came while bytes were arriving: ${JSON.stringify(heard[0])}`);
      assert.ok(heard[1].length >= 2, 'the second waiter joined the same pull and heard it end');
      // One pull: each layer blob was fetched once.
      const blobGets = registry.requests.filter((r) => r.startsWith('GET /v2/exec-test/pull/blobs/'));
      assert.equal(blobGets.length, new Set(blobGets).size, `each blob fetched once: ${blobGets.join(', ')}`);
      for (const client of clients) {
        const result = await (await client.exec(['echo', 'pulled and running'])).wait();
        assert.equal(result.stdout, 'pulled and running\n');
        assert.equal((await client.sessionInfo()).image, image);
      }
    } finally {
      for (const client of clients) await client.deleteSession().catch(() => undefined);
    }
    assert.deepEqual((await (await fetch(`${server.httpUrl}/v1/images/pulls`)).json()).pulls, [], 'nothing in flight');
    await docker.getImage(image).remove();
  },
);

/**
 * Creates a session of `image` over WebSocket, which must fail within `ms` with EXEC_ERR_NOT_FOUND
 * naming the image and matching `reason`, its last progress word `failed` with the same reason.
 */
async function refusedCreate(image: string, reason: RegExp, ms: number): Promise<void> {
  const heard: ImagePull[] = [];
  const err = await within(
    ExecServerClient.connect(server.url, { session: { image }, onImagePull: (p) => heard.push(p) }).then(
      () => assert.fail('the session was created'),
      (e: unknown) => e,
    ),
    ms,
    `a failing pull of ${image}`,
  );
  assert.ok(err instanceof RpcError, String(err));
  assert.equal(err.code, 'EXEC_ERR_NOT_FOUND');
  assert.ok(err.message.includes(image), err.message);
  assert.match(err.message, reason);
  assert.equal(heard.at(-1)?.phase, 'failed');
  assert.match(heard.at(-1)?.error ?? '', reason);
}

test(
  'a pull the registry refuses (404) fails at once with EXEC_ERR_NOT_FOUND naming the image and the reason',
  dockerTestOptions,
  async () => {
    const image = `${registry.host}/exec-test/absent:${randomUUID().slice(0, 8)}`;
    await refusedCreate(image, /manifest unknown/, 30_000);
    // Over HTTP, the same error with its status.
    const res = await fetch(`${server.httpUrl}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ image }),
    });
    assert.equal(res.status, 404);
    const body = (await res.json()) as { code: string; message: string };
    assert.equal(body.code, 'EXEC_ERR_NOT_FOUND');
    assert.ok(body.message.includes(image), body.message);
  },
);

test(
  'a pull that fails midway (a layer blob the registry lacks) is the same clear error, not a success',
  dockerTestOptions,
  async () => {
    const image = freshImage('exec-test/broken');
    await refusedCreate(image, /unknown blob/, 60_000);
    assert.ok(
      registry.requests.some((r) => r.startsWith('GET /v2/exec-test/broken/blobs/')),
      'the pull began',
    );
  },
);

test('exec-server run prints the progress of the pull it waits for on stderr', dockerTestOptions, async () => {
  const image = freshImage('exec-test/cli');
  const main = fileURLToPath(new URL('../../src/main.ts', import.meta.url));
  const r = await run(
    'node',
    ['--import', 'tsx', main, 'run', '--url', server.url, '--image', image, '--', 'echo', 'hi'],
    {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      timeout: 120_000,
    },
  );
  assert.equal(r.stdout, 'hi\n');
  const lines = r.stderr.split('\n').filter((l) => l !== '');
  assert.match(lines[0] ?? '', new RegExp(`^\\[exec-server\\] pulling image ${image.replace(/[.]/g, '\\.')}`));
  assert.match(lines.at(-1) ?? '', /^\[exec-server\] pulled image .*: (\d+\.\d) of \1 MB, (\d+) of \2 layers$/);
  await docker.getImage(image).remove();
});

test(
  "MCP create_session reports the pull as the call's progress when the client asks for it",
  dockerTestOptions,
  async (t) => {
    const image = freshImage('exec-test/mcp');
    const { client } = await mcpClient(t, server.httpUrl);
    const progress: Array<{ progress: number; total?: number | undefined; message?: string | undefined }> = [];
    const result = await client.callTool({ name: 'create_session', arguments: { image, bind: false } }, undefined, {
      onprogress: (p) => progress.push(p),
      timeout: 120_000,
    });
    assert.match(textOf(result), /^created session /);
    assert.ok(progress.length >= 2, `progress heard: ${JSON.stringify(progress)}`);
    const figures = progress.map((p) => p.progress);
    assert.deepEqual(
      figures,
      [...new Set(figures)].sort((a, b) => a - b),
      'the figure grows with every notification',
    );
    assert.match(progress[0]?.message ?? '', new RegExp(`^pulling image ${image.replace(/[.]/g, '\\.')}`));
    assert.match(progress.at(-1)?.message ?? '', /^pulled image .*: (\d+\.\d) of \1 MB, (\d+) of \2 layers$/);
    const sessionId = (result.structuredContent as { sessionId?: string } | undefined)?.sessionId;
    assert.ok(sessionId);
    await fetch(`${server.httpUrl}/v1/sessions/${sessionId}`, { method: 'DELETE' });
    await docker.getImage(image).remove();
  },
);
