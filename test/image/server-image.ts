/**
 * What the server image's tests share: the image (built by scripts/build-server-image.sh), the
 * `docker` command, and the rule for a missing engine or image (under CI=true a failing test,
 * elsewhere the tests skipped with the reason).
 */
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { engineReady, IN_CI } from '../docker/engine.ts';

export const run = promisify(execFile);
export const SERVER_IMAGE = process.env.EXEC_SERVER_SERVER_IMAGE ?? 'exec-server:ci';

/** Runs the docker CLI; its trimmed stdout. */
export async function docker(...args: string[]): Promise<string> {
  const { stdout } = await run('docker', args, { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 });
  return stdout.trim();
}

async function imageMissing(): Promise<string | undefined> {
  if (!engineReady) return 'no Docker engine (see test/docker/engine.ts)';
  return docker('image', 'inspect', SERVER_IMAGE).then(
    () => undefined,
    () => `image ${SERVER_IMAGE} missing: run scripts/build-server-image.sh`,
  );
}

/** Why the image's tests cannot run here, if they cannot. */
export const imageMissingReason = await imageMissing();

/** The options of a test of the image, within `timeout` ms; registers the failing test under CI=true. */
export function serverImageTestOptions(timeout: number): { skip: string | false; timeout: number } {
  const reason = imageMissingReason;
  if (reason !== undefined && IN_CI) {
    test('the server image is available (required under CI=true)', () => {
      throw new Error(reason);
    });
  }
  return {
    skip: reason === undefined ? false : IN_CI ? 'server image missing: see the failing test' : reason,
    timeout,
  };
}
