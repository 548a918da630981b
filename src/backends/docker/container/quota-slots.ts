/**
 * Per-tenant session quotas across a fleet, in the engine (decisions in quota-plan.ts): a slot
 * is a created, never started container named `exec-server-quota-<instance>-<tenant>-q<N>` on
 * the pool's first engine, taken once the session's container exists and removed with the
 * session. Two replicas creating for one tenant at once race for the same names; the engine lets
 * one create win and answers 409 to the other, which tries the next free name or refuses.
 */
import type Docker from 'dockerode';
import { execError } from '../../../errors.ts';
import type { SessionQuota } from '../../fleet-types.ts';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import { LABEL } from './labels.ts';
import { freeSlots, type SeenSlot, SLOT_LABEL, slotName, slotPrefix, staleSlots } from './quota-plan.ts';

/** Where a fleet's quota slots live (the pool's first engine) and which engines its sessions may be on. */
export interface QuotaSlotsOptions {
  readonly instanceId: string;
  /** The engine holding the slots (the pool's first). */
  readonly slots: Docker;
  /** Every engine of the pool: where a slot's session may live. */
  readonly engines: readonly Docker[];
  /** Image of the slot containers (never run); any image of the engine when it lacks this one. */
  readonly image: string;
  readonly timeoutMs: number;
}

const conflict = (status: number | undefined): boolean => status === 409;

/** A fleet's per-tenant session quota as slot containers in the engine. */
export class QuotaSlots implements SessionQuota {
  readonly #o: QuotaSlotsOptions;

  constructor(options: QuotaSlotsOptions) {
    this.#o = options;
  }

  async take(tenant: string, sessionId: string, limit: number): Promise<void> {
    const prefix = slotPrefix(this.#o.instanceId, tenant);
    let taken = await this.#list(tenant);
    let free = freeSlots(limit, taken, prefix);
    if (free.length === 0) {
      // Slots of sessions that are gone (a replica died in between) are given back first.
      const live = await this.#liveSessions(tenant);
      const stale = staleSlots(taken, live, Date.now());
      await Promise.all(stale.map((s) => this.#remove(s.id)));
      taken = taken.filter((s) => !stale.includes(s));
      free = freeSlots(limit, taken, prefix);
      if (free.length === 0) throw quotaReached(limit);
    }
    for (const index of free) if (await this.#create(tenant, sessionId, index)) return;
    // Every free name was taken by another replica meanwhile.
    throw quotaReached(limit);
  }

  async release(sessionId: string): Promise<void> {
    const held = await this.#listBy(`${SLOT_LABEL.session}=${sessionId}`);
    await Promise.all(held.map((s) => this.#remove(s.id)));
  }

  async #create(tenant: string, sessionId: string, index: number): Promise<boolean> {
    const name = slotName(this.#o.instanceId, tenant, index);
    const labels = {
      [SLOT_LABEL.instance]: this.#o.instanceId,
      [SLOT_LABEL.tenant]: tenant,
      [SLOT_LABEL.session]: sessionId,
    };
    const create = (image: string) =>
      withDeadline('quota slot create', this.#o.timeoutMs, (abortSignal) =>
        this.#o.slots.createContainer({ name, Image: image, Labels: labels, Cmd: ['true'], abortSignal }),
      );
    try {
      await create(this.#o.image).catch(async (err: unknown) => {
        if (statusOf((err as { cause?: unknown }).cause) !== 404) throw err;
        await create(await this.#anyImage());
      });
      return true;
    } catch (err) {
      if (conflict(statusOf((err as { cause?: unknown }).cause))) return false;
      throw err;
    }
  }

  async #anyImage(): Promise<string> {
    const images = await withDeadline('image list', this.#o.timeoutMs, () => this.#o.slots.listImages());
    const first = images[0]?.Id;
    if (first === undefined)
      throw execError('EXEC_ERR_BACKEND', 'quota slot: the engine has no image to make a slot of');
    return first;
  }

  #list(tenant: string): Promise<SeenSlot[]> {
    return this.#listBy(`${SLOT_LABEL.instance}=${this.#o.instanceId}`, `${SLOT_LABEL.tenant}=${tenant}`);
  }

  async #listBy(...label: string[]): Promise<SeenSlot[]> {
    const found = await withDeadline('quota slot list', this.#o.timeoutMs, (abortSignal) =>
      this.#o.slots.listContainers({ all: true, filters: { label }, abortSignal }),
    );
    return found.map((c) => ({
      id: c.Id,
      name: c.Names[0] ?? '',
      sessionId: c.Labels[SLOT_LABEL.session] ?? '',
      createdMs: c.Created * 1000,
    }));
  }

  /**
   * Ids of `tenant`'s session containers on every engine. An engine that does not answer fails
   * the whole listing: its sessions' slots must not look stale.
   */
  async #liveSessions(tenant: string): Promise<Set<string>> {
    const label = [`${LABEL.instance}=${this.#o.instanceId}`, `${LABEL.tenant}=${tenant}`];
    const lists = await Promise.all(
      this.#o.engines.map((engine) =>
        withDeadline('session list', this.#o.timeoutMs, (abortSignal) =>
          engine.listContainers({ all: true, filters: { label }, abortSignal }),
        ),
      ),
    );
    return new Set(
      lists
        .flat()
        .map((c) => c.Labels[LABEL.sessionId])
        .filter((id) => id !== undefined),
    );
  }

  async #remove(id: string): Promise<void> {
    await withDeadline('quota slot remove', this.#o.timeoutMs, () =>
      this.#o.slots.getContainer(id).remove({ force: true }),
    ).catch((err: unknown) => {
      if (statusOf((err as { cause?: unknown }).cause) !== 404) throw err;
    });
  }
}

function quotaReached(limit: number) {
  return execError(
    'EXEC_ERR_SESSION_LIMIT',
    `session quota reached: ${limit} of ${limit} sessions for this tenant across the fleet`,
  );
}

/** The quota of a fleet over `engines` (slots on the first), for a backend's resolved options. */
export function quotaSlots(
  engines: readonly [Docker, ...Docker[]] | readonly Docker[],
  o: { readonly instanceId: string; readonly defaultImage: string; readonly engineTimeoutMs: number },
): QuotaSlots {
  const [slots] = engines;
  // A programmer error: the backend always has an engine.
  if (slots === undefined) throw new Error('quotaSlots: no engine');
  return new QuotaSlots({
    instanceId: o.instanceId,
    slots,
    engines,
    image: o.defaultImage,
    timeoutMs: o.engineTimeoutMs,
  });
}
