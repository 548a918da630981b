/**
 * Disk use of a local session (its workspace and private /tmp) for the disk watch: one bounded
 * `du` run outside the event loop, since a workspace may hold millions of files.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { execError } from '../../errors.ts';

/** A `du` that takes longer than this is killed; the watch tries again at its next round. */
const DU_TIMEOUT_MS = 20_000;

/**
 * Bytes used under `paths` together (`du -sxbc`: apparent sizes, one filesystem, hard links
 * counted once). Files `du` cannot read (another user's mode 0700 directory) are left out
 * rather than failing the measurement: du still prints its total then, with exit status 1.
 */
export function localDiskUse(paths: readonly string[]): Promise<number> {
  const existing = paths.filter((p) => existsSync(p));
  if (existing.length === 0) return Promise.resolve(0);
  return new Promise((resolve, reject) => {
    execFile(
      'du',
      ['-sxbc', '--', ...existing],
      { timeout: DU_TIMEOUT_MS, killSignal: 'SIGKILL', maxBuffer: 1024 * 1024 },
      (err, stdout) => {
        const total = /^(\d+)\s+total$/m.exec(stdout);
        if (total?.[1] !== undefined && (err === null || typeof err.code === 'number')) {
          resolve(Number(total[1]));
          return;
        }
        reject(
          execError(
            'EXEC_ERR_BACKEND',
            `cannot measure the disk use of ${existing.join(', ')}: ${err?.message ?? 'du printed no total'}`,
            { cause: err },
          ),
        );
      },
    );
  });
}
