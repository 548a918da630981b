/**
 * The docker backend's start-up check of the host's process ids (docker/engine/host-pids.ts),
 * through createBackend as `npm start` runs it, against the real engine and this host's /proc.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createBackend } from '../../src/backends/create-backend.ts';
import { pidShortfall, readHostThreads } from '../../src/backends/docker/engine/host-pids.ts';
import { loadConfig } from '../../src/config.ts';
import type { Logger } from '../../src/logger.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';

function capturing(warnings: string[]): Logger {
  const log: Logger = {
    info: () => undefined,
    warn: (_o, msg) => void warnings.push(String(msg)),
    error: () => undefined,
    debug: () => undefined,
    child: () => log,
  };
  return log;
}

test('a server whose --max-sessions exceeds what the host pids hold warns at start', dockerTestOptions, async () => {
  const host = await readHostThreads();
  assert.ok(host !== undefined, 'this host has /proc');
  for (const maxSessions of [16, 100_000]) {
    const warnings: string[] = [];
    const config = loadConfig(
      ['--backend', 'docker', '--image', TEST_IMAGE, '--warm-pool', '0', '--max-sessions', String(maxSessions)],
      {},
    );
    const backend = await createBackend(config, capturing(warnings));
    await backend.close();
    const want: number = pidShortfall(host, maxSessions) === undefined ? 0 : 1;
    const shortfalls = warnings.filter((w) => /^kernel\.(pid_max|threads-max) is \d+/.test(w));
    assert.equal(shortfalls.length, want, `${maxSessions}: ${JSON.stringify(warnings)}`);
  }
});
