/**
 * The tenant's sessions across a fleet (docs/architecture.md, "Fleet"), for `GET /v1/sessions`
 * and the MCP `list_sessions` tool: which ones, from the engines' labels; their details from the
 * replica that owns each (sessions whose owner is gone are taken over here first).
 */
import type { TenantId } from '../ids.ts';
import { execError } from '../errors.ts';
import type { SessionInfo } from '../protocol/index.ts';
import type { SessionManager, SessionRoute } from '../sessions/session-manager.ts';
import { FORWARDED_HEADER, LOCAL_ONLY_HEADER } from './fleet-forward.ts';

/** What listing the fleet needs of the caller: the replicas are asked with the caller's own token and query. */
export interface FleetListRequest {
  readonly sessions: SessionManager;
  /** The query string of the listing (`?usage=true`), passed on to the other replicas. */
  readonly query: string;
  /** The caller's `Authorization` header. */
  readonly authorization: string | undefined;
}

/** The infos of another replica's sessions of this tenant, asked with the caller's own token. */
async function remoteInfos(ask: FleetListRequest, url: string, replicaId: string): Promise<SessionInfo[]> {
  const headers: Record<string, string> = { [LOCAL_ONLY_HEADER]: '1', [FORWARDED_HEADER]: replicaId };
  if (ask.authorization !== undefined) headers.authorization = ask.authorization;
  const res = await fetch(new URL(`/v1/sessions${ask.query}`, url), { headers, signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw execError('EXEC_ERR_BACKEND_UNAVAILABLE', `replica at ${url} answered ${res.status}`);
  return ((await res.json()) as { sessions: SessionInfo[] }).sessions;
}

/**
 * The tenant's sessions across the fleet. Sessions on an engine that does not answer are not in
 * its labels, but their owners still hold them: this replica's own, and what every other live
 * replica lists of its own, are added (once each). Undefined without a fleet.
 */
export async function fleetSessionInfos(
  ask: FleetListRequest,
  tenant: TenantId,
  infoOf: (route: Extract<SessionRoute, { kind: 'local' }>) => Promise<SessionInfo>,
): Promise<SessionInfo[] | undefined> {
  const { sessions } = ask;
  const fleet = sessions.backend.fleet;
  if (fleet === undefined) return undefined;
  const [ids, replicas] = await Promise.all([
    sessions.fleetSessions(tenant).then((l) => l ?? []),
    fleet.replicas().catch(() => new Map<string, string>()),
  ]);
  const labelled = new Set<string>(ids.map(({ id }) => id));
  const routes = await Promise.all(ids.map(({ id }) => sessions.route(id, tenant).catch(() => undefined)));
  const local: Promise<SessionInfo>[] = [];
  const owned = new Map<string, Set<string>>();
  routes.forEach((r, i) => {
    if (r?.kind === 'local') local.push(infoOf(r));
    else if (r?.kind === 'remote') owned.set(r.url, (owned.get(r.url) ?? new Set()).add(ids[i]?.id ?? ''));
  });
  for (const session of sessions.list(tenant))
    if (!labelled.has(session.id)) local.push(infoOf({ kind: 'local', session }).catch(() => session.info()));
  for (const [replicaId, url] of replicas)
    if (replicaId !== fleet.replicaId && !owned.has(url)) owned.set(url, new Set());
  const fromOthers = await Promise.all(
    [...owned].map(async ([url, mine]) =>
      (await remoteInfos(ask, url, fleet.replicaId).catch(() => [])).filter(
        (s) => mine.has(s.sessionId) || !labelled.has(s.sessionId),
      ),
    ),
  );
  // A session two replicas still hold (taken over while its engine was away) is listed once.
  const once = new Map<string, SessionInfo>();
  for (const info of [...(await Promise.all(local)), ...fromOthers.flat()])
    if (!once.has(info.sessionId)) once.set(info.sessionId, info);
  return [...once.values()];
}
