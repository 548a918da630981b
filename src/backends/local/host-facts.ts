/**
 * What the local backend reports of its host (`EnvironmentFacts`): its shell, home, temporary
 * directory, platform and the environment a command starts from, without the server's secrets.
 */
import { existsSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import type { EnvironmentFacts } from '../types.ts';

/** Variables of the server's own environment that a child must never inherit. */
function isServerSecret(name: string): boolean {
  return name.startsWith('EXEC_SERVER_') || name === 'CODEX_EXEC_SERVER_CONNECTION_TOKEN';
}

function hostEnvironment(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !isServerSecret(k)) env[k] = v;
  return env;
}

/** The host's facts, read now. */
export function hostFacts(): EnvironmentFacts {
  const shellPath = existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh';
  return {
    shell: { name: shellPath.endsWith('bash') ? 'bash' : 'sh', path: shellPath },
    homeDir: homedir(),
    tempDir: tmpdir(),
    platform: process.platform,
    baseEnv: hostEnvironment(),
  };
}
