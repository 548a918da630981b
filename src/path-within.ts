/**
 * Whether one absolute path lies in another, by their spelling: the sandbox policy, the Codex
 * sandbox entries and the local backend's sandbox all ask it, and must agree on what `..x` (a
 * name inside) and `..` (a step out) mean. Callers that need the places the paths name compare
 * canonical paths (symlinks and `..` resolved) with it.
 */
import { posix } from 'node:path';

/** Whether `path` is `root` or lies in it (both absolute and normalized). */
export function isWithin(path: string, root: string): boolean {
  const rel = posix.relative(root, path);
  // `..` or `../x` is above the root; a name like `..x` is inside it.
  return rel === '' || (rel !== '..' && !rel.startsWith('../') && !posix.isAbsolute(rel));
}
