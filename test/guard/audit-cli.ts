/** `exec-server audit verify` as a user runs it, for the audit log tests. */
import { spawnSync } from 'node:child_process';

const ROOT = new URL('../..', import.meta.url).pathname;

/** Runs `exec-server audit verify PATH...` from the checkout: its exit status and its output. */
export function auditVerify(...paths: string[]): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts', 'audit', 'verify', ...paths], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}
