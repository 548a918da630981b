/** The docker backend's interface: `Backend` and what the server and tests use beyond it. */
import type Docker from 'dockerode';
import type { SessionId, TenantId } from '../../ids.ts';
import type { Backend, MemoryCheckpointTotals, RecoveredSession, WarmPoolReport } from '../types.ts';
import type { RuntimeResolver } from './engine/runtimes.ts';
import type { ResolvedDockerOptions } from './options.ts';

/** The docker backend, with a few extras beyond `Backend` for the server and tests. */
export interface DockerBackend extends Backend {
  readonly kind: 'docker';
  /** The dockerode client (tests, diagnostics). */
  readonly docker: Docker;
  readonly options: ResolvedDockerOptions;
  /** Containers ready in the warm pool right now (of one runtime, or of all). */
  poolReady(runtime?: string): number;
  /** Resolves once every runtime's warm pool is full or `timeoutMs` passed; true when full. */
  poolFull(timeoutMs: number): Promise<boolean>;
  /** The size each runtime's warm pool aims at now, and its creates under way (tests, metrics). */
  poolState(runtime?: string): { ready: number; target: number; creating: number };
  /** Every warm pool, a runtime's or a live template's, with what it holds and aims at. */
  warmPools(): WarmPoolReport[];
  /** Which runtimes sessions get and may ask for (runtimes.ts). */
  readonly runtimes: RuntimeResolver;
  /**
   * Stops acting for the instance and gives its lease up, leaving every container and process
   * running for the next server with the same instance id (a hand-over); the backend is closed.
   */
  handOver(): Promise<void>;
  /** Sessions this backend holds now (placement over a pool of engines). */
  readonly sessionCount: number;
  /** Re-adopts one running container of the instance as a session (recovery, a fleet take-over). */
  adoptRunning(c: Docker.ContainerInfo, sessionId: SessionId, tenant: TenantId): Promise<RecoveredSession | undefined>;
  /** Whether this engine has the snapshot `tenant` may use (placement of sessions made from it). */
  hasSnapshot(snapshotId: string, tenant: TenantId | undefined): Promise<boolean>;
  /** Containers restored from a live template ready in its pool (`warmPoolTemplates`), of one or all. */
  templatePoolReady(template?: string): string[];
  /** The memory checkpoints of live templates this backend keeps. */
  memoryCheckpoints(): MemoryCheckpointTotals;
}
