/**
 * Per-tenant session quotas across a fleet, the decisions (no engine calls here; the engine
 * part is quota-slots.ts). A tenant's quota of N sessions is N slot names; a live session holds
 * one slot: a created, never started container of that name on the pool's first engine. Engine
 * container names are unique, so taking a slot is one atomic create that either succeeds or
 * answers 409, whatever the number of replicas creating at the same moment: no consensus of our
 * own, and no overshoot.
 */
import { createHash } from 'node:crypto';

/** Labels of a slot container (never `exec-server.instance`: recovery must not adopt it). */
export const SLOT_LABEL = {
  /** The instance id of the fleet. */
  instance: 'exec-server.quota-instance',
  tenant: 'exec-server.quota-tenant',
  /** The session holding the slot. */
  session: 'exec-server.quota-session',
} as const;

/**
 * A slot whose session is not among the fleet's sessions is left over (a replica died between
 * removing a session and its slot). A slot is only taken once its session's container exists,
 * so a slot without one is stale at once; this margin covers listings that race a removal.
 */
export const STALE_SLOT_MS = 5_000;

const short = (s: string): string => createHash('sha256').update(s).digest('hex').slice(0, 12);

/** Name prefix of `tenant`'s slots in instance `instanceId` (hashes: a tenant may be any string). */
export function slotPrefix(instanceId: string, tenant: string): string {
  return `exec-server-quota-${short(instanceId)}-${short(tenant)}-q`;
}

/** The engine name of a tenant's quota slot `index`. */
export function slotName(instanceId: string, tenant: string, index: number): string {
  return `${slotPrefix(instanceId, tenant)}${index}`;
}

/** A slot container as listed by the engine. */
export interface SeenSlot {
  /** Container id: a stale slot is removed by id, never by name (the name may be taken again meanwhile). */
  readonly id: string;
  readonly name: string;
  readonly sessionId: string;
  readonly createdMs: number;
}

/** The slot index a name stands for, or undefined for a name of another tenant or instance. */
export function slotIndex(name: string, prefix: string): number | undefined {
  const bare = name.startsWith('/') ? name.slice(1) : name;
  if (!bare.startsWith(prefix)) return undefined;
  const rest = bare.slice(prefix.length);
  return /^(0|[1-9][0-9]{0,5})$/.test(rest) ? Number(rest) : undefined;
}

/** Slot indexes below `limit` that no listed slot holds, lowest first (the order creates try them). */
export function freeSlots(limit: number, taken: readonly SeenSlot[], prefix: string): number[] {
  const held = new Set(taken.map((s) => slotIndex(s.name, prefix)));
  return Array.from({ length: limit }, (_, i) => i).filter((i) => !held.has(i));
}

/** Slots held by sessions that no longer exist, past the margin; `live` is every session id of the tenant. */
export function staleSlots(taken: readonly SeenSlot[], live: ReadonlySet<string>, nowMs: number): SeenSlot[] {
  return taken.filter((s) => !live.has(s.sessionId) && nowMs - s.createdMs >= STALE_SLOT_MS);
}
