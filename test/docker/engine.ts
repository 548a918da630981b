/**
 * Engine availability for the docker tests. Under `CI=true` a missing engine (or test image)
 * is a failure; elsewhere the tests are skipped with the reason.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { test } from 'node:test';
import Docker from 'dockerode';

const run = promisify(execFile);

export const TEST_IMAGE = process.env.EXEC_SERVER_TEST_IMAGE ?? 'exec-server-test:latest';
export const IN_CI = process.env.CI === 'true' || process.env.CI === '1';

/** Why docker tests cannot run here, or undefined when they can. Builds the test image if missing. */
async function unavailableReason(): Promise<string | undefined> {
  const docker = new Docker(process.env.DOCKER_HOST ? undefined : { socketPath: '/var/run/docker.sock' });
  try {
    await Promise.race([
      docker.ping(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('ping timed out after 15 s')), 15_000)),
    ]);
  } catch (err) {
    return `no Docker engine answers (${(err as Error).message}); run scripts/start-dockerd.sh`;
  }
  try {
    await docker.getImage(TEST_IMAGE).inspect();
  } catch {
    try {
      await run('bash', [new URL('../../scripts/build-test-image.sh', import.meta.url).pathname], { timeout: 120_000 });
    } catch (err) {
      return `test image ${TEST_IMAGE} missing and cannot be built: ${(err as Error).message}`;
    }
  }
  return undefined;
}

const reason = await unavailableReason();

if (reason !== undefined && IN_CI) {
  test('docker engine is available (required under CI=true)', () => {
    throw new Error(reason);
  });
}

/** Options for `test()`: skipped (outside CI) when the engine is missing. */
export const dockerTestOptions: { skip?: string; timeout: number } =
  reason === undefined
    ? { timeout: 120_000 }
    : IN_CI
      ? { skip: `engine missing: see the failing test`, timeout: 1000 }
      : { skip: reason, timeout: 1000 };

export const engineReady = reason === undefined;
