/**
 * Maps the `sandbox` object Codex sends on `process/start` (a permissions profile with
 * read / write / none entries and `workspaceRoots`) onto a narrowing of the session policy.
 * The session policy stays the ceiling: whatever this returns can only take rights away.
 */
import type { SandboxNarrowing } from '../../policy/sandbox-policy.ts';
import { toPath } from '../../protocol/index.ts';
import type { Session } from '../../sessions/session.ts';

type Json = Record<string, unknown>;

const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function entryPaths(path: unknown, workspaceRoots: string[], tempDir: string): string[] {
  if (!isObj(path)) return [];
  if (path['type'] === 'path' && typeof path['path'] === 'string') return [toPath(path['path'])];
  if (path['type'] !== 'special' || !isObj(path['value'])) return [];
  const value = path['value'];
  const sub = typeof value['subpath'] === 'string' ? `/${value['subpath']}` : '';
  switch (value['kind']) {
    case 'root':
      return ['/'];
    case 'project_roots':
      return workspaceRoots.map((r) => `${r.replace(/\/$/, '')}${sub}`);
    case 'slash_tmp':
      return ['/tmp'];
    case 'tmpdir':
      return [tempDir];
    default:
      return [];
  }
}

/** `undefined`: no narrowing (Codex sends `sandbox: null` for full access, or a shape we do not know). */
export function narrowingFromCodexSandbox(sandbox: Json, session: Session): SandboxNarrowing | undefined {
  const permissions = sandbox['permissions'];
  if (!isObj(permissions)) return undefined;
  const roots = Array.isArray(sandbox['workspaceRoots'])
    ? sandbox['workspaceRoots']
        .filter((r): r is string => typeof r === 'string')
        .map((r) => session.mapClientPath(toPath(r)))
    : [session.backend.workdir];
  const network =
    permissions['network'] === 'enabled' ? undefined : permissions['network'] === 'restricted' ? false : undefined;
  const fileSystem = permissions['file_system'];
  if (!isObj(fileSystem) || fileSystem['type'] !== 'restricted' || !Array.isArray(fileSystem['entries'])) {
    return network === false ? { network } : undefined;
  }
  const writable: string[] = [];
  const denyRead: string[] = [];
  for (const entry of fileSystem['entries']) {
    if (!isObj(entry)) continue;
    const paths = entryPaths(entry['path'], roots, session.backend.environment.tempDir).map((p) =>
      session.mapClientPath(p),
    );
    // Read-only carve-outs inside writable roots (`.git`, `.codex`) cannot be expressed by the
    // backends' sandboxes; they stay writable as the session policy allows.
    if (entry['access'] === 'write') writable.push(...paths);
    else if (entry['access'] === 'none') denyRead.push(...paths);
  }
  return { writableRoots: writable, denyRead, network };
}
