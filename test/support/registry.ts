/**
 * A minimal Docker Registry HTTP API v2 for tests that pull without the internet: `/v2/`, image
 * manifests (schema 2) and blobs (gzipped layer tars and the config JSON, by sha256 digest),
 * GET and HEAD, on 127.0.0.1 (the engine treats 127.0.0.0/8 registries as insecure: plain HTTP).
 * Blobs are sent at a bounded rate so a pull lasts long enough to report progress.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';

const run = promisify(execFile);
const MANIFEST_TYPE = 'application/vnd.docker.distribution.manifest.v2+json';
const CHUNK = 64 * 1024;

const sha256 = (b: Buffer): string => `sha256:${createHash('sha256').update(b).digest('hex')}`;

/** An image as the registry serves it: its manifest and every blob it names. */
export interface RegistryImage {
  readonly manifest: Buffer;
  readonly blobs: ReadonlyMap<string, Buffer>;
  /** Bytes of the layer blobs (what the engine downloads). */
  readonly layerBytes: number;
}

/**
 * The image `source` (present in the local engine, via `docker save`) plus one layer of
 * `extraBytes` random bytes, so every call gives blobs the engine has never seen (it downloads
 * them instead of finding them already there).
 */
export async function imageFrom(source: string, extraBytes: number): Promise<RegistryImage> {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-registry-'));
  try {
    await run('docker', ['save', '-o', join(dir, 'image.tar'), source]);
    await run('tar', ['-xf', join(dir, 'image.tar'), '-C', dir]);
    const saved = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as [
      { Config: string; Layers: string[] },
    ];
    const config = JSON.parse(await readFile(join(dir, saved[0].Config), 'utf8')) as {
      rootfs: { diff_ids: string[] };
      history?: object[];
    };
    const tars = await Promise.all(saved[0].Layers.map((l) => readFile(join(dir, l))));
    await mkdir(join(dir, 'extra'));
    await writeFile(join(dir, 'extra', 'pull-test-data'), randomBytes(extraBytes));
    await run('tar', ['-cf', join(dir, 'extra.tar'), '-C', join(dir, 'extra'), 'pull-test-data']);
    const extra = await readFile(join(dir, 'extra.tar'));
    tars.push(extra);
    config.rootfs.diff_ids.push(sha256(extra));
    config.history?.push({ created: new Date().toISOString(), created_by: 'pull test layer' });
    const configBlob = Buffer.from(JSON.stringify(config));
    const blobs = new Map<string, Buffer>([[sha256(configBlob), configBlob]]);
    const layers = tars.map((tar) => {
      const gz = gzipSync(tar, { level: 1 });
      blobs.set(sha256(gz), gz);
      return { mediaType: 'application/vnd.docker.image.rootfs.diff.tar.gzip', size: gz.length, digest: sha256(gz) };
    });
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MANIFEST_TYPE,
        config: {
          mediaType: 'application/vnd.docker.container.image.v1+json',
          size: configBlob.length,
          digest: sha256(configBlob),
        },
        layers,
      }),
    );
    return { manifest, blobs, layerBytes: layers.reduce((n, l) => n + l.size, 0) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export interface TestRegistry {
  /** `127.0.0.1:<port>`, the prefix of image names it serves. */
  readonly host: string;
  /** Every request as `METHOD path`, in order. */
  readonly requests: readonly string[];
  close(): Promise<void>;
}

/**
 * Serves one image per repository under every tag (so each test can pull a tag the engine has
 * never seen), blobs at `bytesPerSecond`; anything else is the registry's 404
 * (`MANIFEST_UNKNOWN`, `BLOB_UNKNOWN`, `NAME_UNKNOWN`).
 */
export async function startRegistry(
  repositories: Readonly<Record<string, RegistryImage>>,
  bytesPerSecond: number,
): Promise<TestRegistry> {
  const requests: string[] = [];
  const notFound = (res: ServerResponse, code: string): void => {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ errors: [{ code, message: code.toLowerCase().replace('_', ' ') }] }));
  };
  const server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    res.setHeader('docker-distribution-api-version', 'registry/2.0');
    const head = req.method === 'HEAD';
    if (req.method !== 'GET' && !head) return notFound(res, 'UNSUPPORTED');
    if (req.url === '/v2/' || req.url === '/v2') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(head ? undefined : '{}');
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/?]+)$/.exec(req.url ?? '');
    if (!m) return notFound(res, 'NAME_UNKNOWN');
    const [, name, kind, ref] = m as unknown as [string, string, string, string];
    const image = Object.hasOwn(repositories, name) ? repositories[name] : undefined;
    if (kind === 'manifests') {
      // By tag (any) or by the manifest's own digest.
      if (!image || (ref.startsWith('sha256:') && ref !== sha256(image.manifest)))
        return notFound(res, 'MANIFEST_UNKNOWN');
      res.writeHead(200, {
        'content-type': MANIFEST_TYPE,
        'content-length': image.manifest.length,
        'docker-content-digest': sha256(image.manifest),
      });
      return res.end(head ? undefined : image.manifest);
    }
    const blob = image?.blobs.get(ref);
    if (!blob) return notFound(res, 'BLOB_UNKNOWN');
    res.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': blob.length,
      'docker-content-digest': ref,
    });
    if (head) return res.end();
    // Throttled: one chunk per CHUNK / bytesPerSecond seconds.
    let offset = 0;
    const next = (): void => {
      if (res.destroyed) return;
      if (offset >= blob.length) return void res.end();
      res.write(blob.subarray(offset, offset + CHUNK));
      offset += CHUNK;
      setTimeout(next, (CHUNK / bytesPerSecond) * 1000);
    };
    next();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    host: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
