/**
 * Codex's pruning rule, used by the per-session process limit (process-table.ts) and by the
 * unified-exec facade's own limit (tools/unified-exec.ts): the most recently used entries are
 * protected; of the others, the least recently used ended one goes first, else the least
 * recently used that `mayEnd` allows.
 */

/** Entries protected from pruning: the most recently used ones (Codex keeps 8). */
export const PRUNE_PROTECTED = 8;

/** The entry to drop, or undefined when none may go. */
export function pruneVictim<T extends { readonly lastUsed: number }>(
  entries: readonly T[],
  ended: (e: T) => boolean,
  mayEnd: (e: T) => boolean = () => true,
): T | undefined {
  const lru = [...entries]
    .sort((a, b) => b.lastUsed - a.lastUsed)
    .slice(PRUNE_PROTECTED)
    .reverse();
  return lru.find(ended) ?? lru.find(mayEnd);
}
