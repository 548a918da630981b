/**
 * Label names on containers and snapshot images. They are how the server finds its own
 * objects again (startup recovery, events filtering, snapshot ownership): never rename.
 */
export const LABEL = {
  sessionId: 'exec-server.session-id',
  instance: 'exec-server.instance',
  tenant: 'exec-server.tenant',
  created: 'exec-server.created',
  workdir: 'exec-server.workdir',
  /** `true` on warm-pool containers (they get a session by being renamed, see warm-pool.ts). */
  pool: 'exec-server.pool',
  /** `true` on snapshot images. */
  snapshot: 'exec-server.snapshot',
  snapshotName: 'exec-server.snapshot-name',
  snapshotSession: 'exec-server.snapshot-session',
  snapshotCreated: 'exec-server.snapshot-created',
  /** `true` on live templates: the snapshot's memory checkpoint is in the server's store. */
  snapshotMemory: 'exec-server.snapshot-memory',
} as const;

/** Prefix of user labels from the session spec (`labels: {team: "x"}` -> `exec-server.label.team`). */
export const USER_LABEL_PREFIX = 'exec-server.label.';

/** A session's own labels as container labels, under `exec-server.label.`. */
export function userLabels(labels: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels)) out[USER_LABEL_PREFIX + k] = v;
  return out;
}

/** The session's own labels back from its container's labels. */
export function readUserLabels(labels: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels ?? {})) {
    if (k.startsWith(USER_LABEL_PREFIX)) out[k.slice(USER_LABEL_PREFIX.length)] = v;
  }
  return out;
}
