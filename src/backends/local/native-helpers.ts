/**
 * Where the local backend's native helpers live: `scripts/build-native.sh` (run by `npm install`)
 * compiles `native/<name>.c` into `build/<name>`.
 */
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, relative, isAbsolute } from 'node:path';
import { fileURLToPath } from 'node:url';

export type NativeHelper = 'pty-relay' | 'sandbox-join';

/** Where the built helper `name` is (it may be missing: no C compiler at install). */
export function nativeHelperPath(name: NativeHelper): string {
  return fileURLToPath(new URL(`../../../build/${name}`, import.meta.url));
}

/** Where a root server keeps what its sandboxes must reach outside /tmp (also the placeholders' parent). */
const ROOT_STATE_DIR = '/run/exec-server';

function underTmp(path: string): boolean {
  const rel = relative('/tmp', path);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

/**
 * build/sandbox-join as a sandbox can run it. It runs inside the sandbox (a warm sandbox's
 * holder, a cold command's change of user) as root without capabilities, where the session's
 * private /tmp (mode 0700, its user's) covers the host's: a checkout or an installed package
 * under /tmp leaves it out of reach. A root server then runs a copy outside /tmp, named by its
 * content (servers of other versions keep theirs; the same version shares one, written once).
 * Elsewhere (not root: sandboxes never run the helper inside), or when the copy fails, the
 * build's own path.
 */
export function sandboxJoinPath(build = nativeHelperPath('sandbox-join'), stateDir = ROOT_STATE_DIR): string {
  if (process.getuid?.() !== 0 || !underTmp(build) || !existsSync(build)) return build;
  try {
    const bytes = readFileSync(build);
    const name = `sandbox-join-${createHash('sha256').update(bytes).digest('hex').slice(0, 16)}`;
    const dir = join(stateDir, 'helpers');
    const copy = join(dir, name);
    if (existsSync(copy)) return copy;
    mkdirSync(stateDir, { recursive: true, mode: 0o711 });
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    const staging = `${copy}.${process.pid}`;
    writeFileSync(staging, bytes, { mode: 0o755 });
    chmodSync(staging, 0o755);
    renameSync(staging, copy);
    return copy;
  } catch {
    return build;
  }
}
