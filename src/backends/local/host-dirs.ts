/**
 * Which host directories a confined tenant may name (`--local-host-dirs`).
 *
 * On the local backend a session's workdir, its policy's extra writable roots and a Codex
 * client's working directory are host paths, and naming one has effects beyond the session: a
 * root-owned directory is lent to the sandbox user (chowned for the session's life), and one an
 * ordinary user owns makes the session's commands run as that user, with everything that user
 * may read and write. For a tenant the operator trusts to run outside the sandbox
 * (`danger-full-access` among its `--allowed-sandbox-types`) that reaches nothing new. For any
 * other tenant such paths must lie in a directory the operator named: otherwise `/opt/app` or
 * `/home/alice` would be one session's to write in, or to run as.
 */
import { execError } from '../../errors.ts';
import { isWithin } from '../../path-within.ts';
import { canonicalPath } from './workspace-users.ts';

/**
 * Whether `path` lies in one of `hostDirs` once both are canonical (symlinks resolved, so a link
 * inside an allowed directory leads nowhere else); `hostDirs` undefined: any path does.
 */
export async function withinHostDirs(path: string, hostDirs: readonly string[] | undefined): Promise<boolean> {
  if (hostDirs === undefined) return true;
  const wanted = await canonicalPath(path);
  const roots = await Promise.all(hostDirs.map((d) => canonicalPath(d)));
  return roots.some((root) => isWithin(wanted, root));
}

/** Refuses `path` (the client's `field`) outside `hostDirs`: 403 `EXEC_ERR_HOST_DIR_FORBIDDEN`. */
export async function checkHostDir(
  path: string,
  field: string,
  hostDirs: readonly string[] | undefined,
): Promise<void> {
  if (await withinHostDirs(path, hostDirs)) return;
  const allowed = hostDirs ?? [];
  throw execError(
    'EXEC_ERR_HOST_DIR_FORBIDDEN',
    `${field} ${path}: this tenant may name host directories only in ${allowed.length > 0 ? allowed.join(', ') : '(none)'} (see --local-host-dirs); leave it out to get a workspace of the server's`,
    { detail: { field, allowed } },
  );
}
