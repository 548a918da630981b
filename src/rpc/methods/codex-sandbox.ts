/**
 * Maps the `sandbox` object Codex sends on `process/start` (a permissions profile with
 * read / write / none entries and `workspaceRoots`) onto a narrowing of the session policy.
 * The session policy stays the ceiling: whatever this returns can only take rights away.
 */
import { execError, type ExecServerError } from '../../errors.ts';
import type { SandboxNarrowing } from '../../policy/sandbox-policy.ts';
import { toPath } from '../../protocol/index.ts';
import type { Session } from '../../sessions/session.ts';
import { isWithin } from '../../path-within.ts';

type Json = Record<string, unknown>;

const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Where the entries sit in the call's params (what an error's `data.field` names). */
const ENTRIES = 'sandbox.permissions.file_system.entries';

function invalid(field: string, why: string): ExecServerError {
  return execError('EXEC_ERR_INVALID_PARAMS', `invalid params: ${field}: ${why}`, { detail: { field } });
}

/**
 * An absolute path of the profile (`file://` URIs too): a relative or empty one names no place
 * to apply it, and one with a `..` segment names a place only the sandbox would resolve, after
 * this check, and not always as the client meant (through a symbolic link).
 */
function absolutePath(value: string, field: string): string {
  let path: string;
  try {
    path = toPath(value);
  } catch (err) {
    throw invalid(field, err instanceof Error ? err.message : String(err));
  }
  if (!path.startsWith('/')) throw invalid(field, `${JSON.stringify(value)} is not an absolute path`);
  if (path.split('/').includes('..')) throw invalid(field, `${JSON.stringify(value)} has a .. segment`);
  return path;
}

/** A `project_roots` subpath: relative, and inside the root (`.git`, `.codex`, `src/gen`). */
function subpathOf(value: Json, field: string): string {
  const sub = value['subpath'];
  if (sub === undefined || sub === null) return '';
  if (typeof sub !== 'string') throw invalid(field, 'must be a string');
  if (sub.startsWith('/')) throw invalid(field, `${JSON.stringify(sub)} must be relative to the project root`);
  if (sub.split('/').includes('..')) throw invalid(field, `${JSON.stringify(sub)} leaves the project root (..)`);
  if (sub.includes('\0')) throw invalid(field, 'must not contain a NUL byte');
  return sub === '' ? '' : `/${sub}`;
}

/** The paths an entry of the profile names; `[]` for a kind this server does not know. */
function entryPaths(path: unknown, field: string, workspaceRoots: string[], tempDir: string): string[] {
  if (!isObj(path)) return [];
  if (path['type'] === 'path') {
    if (typeof path['path'] !== 'string') throw invalid(`${field}.path`, 'must be a string');
    return [absolutePath(path['path'], `${field}.path`)];
  }
  if (path['type'] !== 'special' || !isObj(path['value'])) return [];
  const value = path['value'];
  switch (value['kind']) {
    case 'root':
      return ['/'];
    case 'project_roots': {
      const sub = subpathOf(value, `${field}.value.subpath`);
      return workspaceRoots.map((r) => `${r.replace(/\/$/, '')}${sub}`);
    }
    case 'slash_tmp':
      return ['/tmp'];
    case 'tmpdir':
      return [tempDir];
    default:
      return [];
  }
}

/** The project roots: the call's `workspaceRoots` (absolute, as the entries' paths), else the session's workdir. */
function projectRoots(sandbox: Json, session: Session): string[] {
  const roots = sandbox['workspaceRoots'];
  if (!Array.isArray(roots)) return [session.backend.workdir];
  return roots.flatMap((r, i) =>
    typeof r === 'string' ? [session.mapClientPath(absolutePath(r, `sandbox.workspaceRoots[${i}]`))] : [],
  );
}

/**
 * Refuses a `none` entry over the workspace or a project root (the filesystem root, `/tmp`
 * holding the workspace, the project root itself). For Codex the more specific entry wins, so
 * the roots stay usable inside the denied place (and `none` on the root only drops full-disk
 * read); our sandboxes cover a deny-read path whole, so the command could not start at all, and
 * failed with the sandbox's own message.
 */
function checkDenied(denied: readonly string[], roots: readonly string[], field: string): void {
  for (const path of denied) {
    const covered = roots.find((root) => isWithin(root, path));
    if (covered !== undefined)
      throw invalid(
        field,
        `a none entry on ${path} covers the project root ${covered}, which a command needs; deny paths inside it instead`,
      );
  }
}

/** `undefined`: no narrowing (Codex sends `sandbox: null` for full access, or a shape we do not know). */
export function narrowingFromCodexSandbox(sandbox: Json, session: Session): SandboxNarrowing | undefined {
  const permissions = sandbox['permissions'];
  if (!isObj(permissions)) return undefined;
  const roots = projectRoots(sandbox, session);
  const network =
    permissions['network'] === 'enabled' ? undefined : permissions['network'] === 'restricted' ? false : undefined;
  const fileSystem = permissions['file_system'];
  if (!isObj(fileSystem) || fileSystem['type'] !== 'restricted' || !Array.isArray(fileSystem['entries'])) {
    return network === false ? { network } : undefined;
  }
  const writable: string[] = [];
  const denyRead: string[] = [];
  for (const [i, entry] of fileSystem['entries'].entries()) {
    // Read-only carve-outs inside writable roots (`.git`, `.codex`) cannot be expressed by the
    // backends' sandboxes; they stay writable as the session policy allows. Only the entries
    // applied are checked: a read entry changes nothing, whatever it names.
    if (!isObj(entry) || (entry['access'] !== 'write' && entry['access'] !== 'none')) continue;
    const field = `${ENTRIES}[${i}].path`;
    const paths = entryPaths(entry['path'], field, roots, session.backend.environment.tempDir).map((p) =>
      session.mapClientPath(p),
    );
    if (entry['access'] === 'none') checkDenied(paths, [...roots, session.backend.workdir], field);
    (entry['access'] === 'write' ? writable : denyRead).push(...paths);
  }
  return { writableRoots: writable, denyRead, network };
}
