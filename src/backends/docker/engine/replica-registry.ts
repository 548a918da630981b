/**
 * What a fleet's replicas know of each other and of who owns which session, read from the
 * engine (docs/architecture.md, "Fleet"): nothing of it lives in one replica's memory.
 *
 * - Live replicas: the running replica leases of the instance (instance-lease.ts), with their
 *   advertised URLs. A lease ends with its holder's engine connection.
 * - Owners: a session is owned by the replica that made it (the `exec-server.replica` label of
 *   its container) until another replica claims it. A claim is a container that is created and
 *   never started, named `exec-server-claim-<session>-<generation>`: the engine's unique names
 *   make the claim of generation n+1 atomic, so of two replicas that find the owner's lease gone
 *   at the same moment exactly one gets 409 Conflict and forwards to the other.
 */
import type Docker from 'dockerode';
import { ExecServerError } from '../../../errors.ts';
import { statusOf, withDeadline } from './engine-client.ts';
import { ADVERTISE_LABEL, LEASE_LABEL, REPLICA_LABEL } from './instance-lease.ts';

/** Label on a claim: the session it claims. */
export const CLAIM_LABEL = 'exec-server.claim';
/** Label on a claim: the instance (not `exec-server.instance`, which recovery adopts or removes). */
export const CLAIM_INSTANCE_LABEL = 'exec-server.claim-instance';
const CLAIM_GENERATION_LABEL = 'exec-server.claim-generation';

/** Live replicas are read at most this often (a lease ends within a moment of its holder anyway). */
const REPLICAS_TTL_MS = 250;

/** Who owns a session now: a replica id (undefined: made by a lone server) and the claim generation. */
export interface Owner {
  readonly replicaId: string | undefined;
  readonly generation: number;
}

/** A fleet's live replicas and who owns which session, read from the engine; claims made there. */
export class ReplicaRegistry {
  readonly #docker: Docker;
  readonly #instanceId: string;
  readonly #timeoutMs: number;
  #replicas: { at: number; value: Promise<Map<string, string>> } | undefined;

  constructor(docker: Docker, instanceId: string, timeoutMs: number) {
    this.#docker = docker;
    this.#instanceId = instanceId;
    this.#timeoutMs = timeoutMs;
  }

  /** Live replicas of the instance: replica id → advertised URL. `fresh` skips the short cache. */
  replicas(fresh = false): Promise<Map<string, string>> {
    const cached = this.#replicas;
    if (!fresh && cached !== undefined && Date.now() - cached.at < REPLICAS_TTL_MS) return cached.value;
    const value = this.#listReplicas();
    this.#replicas = { at: Date.now(), value };
    value.catch(() => {
      if (this.#replicas?.value === value) this.#replicas = undefined;
    });
    return value;
  }

  async #listReplicas(): Promise<Map<string, string>> {
    const leases = await withDeadline('lease list', this.#timeoutMs, (abortSignal) =>
      this.#docker.listContainers({
        filters: { label: [`${LEASE_LABEL}=${this.#instanceId}`, REPLICA_LABEL], status: ['running'] },
        abortSignal,
      }),
    );
    const out = new Map<string, string>();
    for (const c of leases) {
      const id = c.Labels?.[REPLICA_LABEL];
      const url = c.Labels?.[ADVERTISE_LABEL];
      if (id !== undefined && url !== undefined) out.set(id, url);
    }
    return out;
  }

  /** Every claim of the instance: session id → its newest claim. */
  async claims(): Promise<Map<string, Owner>> {
    const list = await withDeadline('claim list', this.#timeoutMs, (abortSignal) =>
      this.#docker.listContainers({
        all: true,
        filters: { label: [`${CLAIM_INSTANCE_LABEL}=${this.#instanceId}`] },
        abortSignal,
      }),
    );
    const out = new Map<string, Owner>();
    for (const c of list) {
      const sessionId = c.Labels?.[CLAIM_LABEL];
      const generation = Number(c.Labels?.[CLAIM_GENERATION_LABEL] ?? 0);
      if (sessionId === undefined || (out.get(sessionId)?.generation ?? -1) >= generation) continue;
      out.set(sessionId, { replicaId: c.Labels?.[REPLICA_LABEL], generation });
    }
    return out;
  }

  /** The owner of one session: its newest claim, else the replica that made its container. */
  async owner(sessionId: string, containerLabels: Readonly<Record<string, string>>): Promise<Owner> {
    const list = await withDeadline('claim list', this.#timeoutMs, (abortSignal) =>
      this.#docker.listContainers({
        all: true,
        filters: { label: [`${CLAIM_INSTANCE_LABEL}=${this.#instanceId}`, `${CLAIM_LABEL}=${sessionId}`] },
        abortSignal,
      }),
    );
    let owner: Owner = { replicaId: containerLabels[REPLICA_LABEL], generation: 0 };
    for (const c of list) {
      const generation = Number(c.Labels?.[CLAIM_GENERATION_LABEL] ?? 0);
      if (generation > owner.generation) owner = { replicaId: c.Labels?.[REPLICA_LABEL], generation };
    }
    return owner;
  }

  /**
   * Claims `sessionId` for `replicaId` as generation `generation` (the owner's plus one): true
   * when this call made the claim, false when another replica made that generation first.
   * `image`: any image the engine has (the session's own); the claim never runs.
   */
  async claim(sessionId: string, generation: number, replicaId: string, image: string): Promise<boolean> {
    try {
      await withDeadline('claim create', this.#timeoutMs, (abortSignal) =>
        this.#docker.createContainer({
          name: `exec-server-claim-${sessionId}-${generation}`,
          Image: image,
          Entrypoint: ['/exec-server-claim-never-runs'],
          Cmd: [],
          Labels: {
            [CLAIM_LABEL]: sessionId,
            [CLAIM_INSTANCE_LABEL]: this.#instanceId,
            [CLAIM_GENERATION_LABEL]: String(generation),
            [REPLICA_LABEL]: replicaId,
          },
          NetworkDisabled: true,
          HostConfig: { NetworkMode: 'none' },
          abortSignal,
        } as Docker.ContainerCreateOptions),
      );
      return true;
    } catch (err) {
      if ((err instanceof ExecServerError ? statusOf(err.cause) : statusOf(err)) === 409) return false;
      throw err;
    }
  }

  /** Removes the claims of sessions that are gone (`keep`: the sessions that still have a container). */
  async sweepClaims(keep: ReadonlySet<string>): Promise<void> {
    const list = await withDeadline('claim list', this.#timeoutMs, (abortSignal) =>
      this.#docker.listContainers({
        all: true,
        filters: { label: [`${CLAIM_INSTANCE_LABEL}=${this.#instanceId}`] },
        abortSignal,
      }),
    );
    await Promise.all(
      list
        .filter((c) => !keep.has(c.Labels?.[CLAIM_LABEL] ?? ''))
        .map((c) =>
          withDeadline('claim remove', this.#timeoutMs, (abortSignal) =>
            this.#docker.getContainer(c.Id).remove({ force: true, abortSignal }),
          ).catch(() => undefined),
        ),
    );
  }

  /** Removes the claims of one session (it was deleted). */
  async removeClaims(sessionId: string): Promise<void> {
    const list = await withDeadline('claim list', this.#timeoutMs, (abortSignal) =>
      this.#docker.listContainers({
        all: true,
        filters: { label: [`${CLAIM_INSTANCE_LABEL}=${this.#instanceId}`, `${CLAIM_LABEL}=${sessionId}`] },
        abortSignal,
      }),
    );
    await Promise.all(
      list.map((c) =>
        withDeadline('claim remove', this.#timeoutMs, (abortSignal) =>
          this.#docker.getContainer(c.Id).remove({ force: true, abortSignal }),
        ).catch(() => undefined),
      ),
    );
  }
}
