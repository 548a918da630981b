/**
 * The replicas of one fleet in the fleet tests: server processes (test/support/dev-server.ts) with
 * one --instance-id and --fleet on the engine, each named by its --replica-id, and their end
 * after the test (their logs shown under FLEET_TEST_LOGS, the processes SIGKILLed, the instance's
 * containers removed).
 */
import type { TestContext } from 'node:test';
import { type DevServer, spawnDevServer } from '../support/dev-server.ts';
import { TEST_IMAGE } from './engine.ts';
import { removeInstanceContainers } from './helpers.ts';

export interface Replica extends DevServer {
  /** Its --replica-id. */
  readonly name: string;
}

/** A replica for each name of `N`, in its order. */
type ReplicasOf<N extends readonly string[]> = { -readonly [K in keyof N]: Replica };

export interface FleetSpec {
  readonly instanceId: string;
  /** The flags every replica gets after `--fleet --replica-id NAME`. */
  readonly flags?: (name: string) => readonly string[];
  /** The replicas' environment, unless `start` is given one. */
  readonly env?: NodeJS.ProcessEnv;
  /** `info` unless given: the tests read the replicas' `took over` lines. */
  readonly logLevel?: 'warn' | 'info' | 'debug';
  /** `capture` unless given: kept for `stderr()` and for FLEET_TEST_LOGS. */
  readonly stderr?: 'inherit' | 'capture';
  /** What `cleanUp` removes once the replicas are dead: by default the instance's containers on the engine. */
  readonly removeContainers?: () => Promise<void>;
}

export class Fleet {
  /** Every replica started, in order, dead ones too. */
  readonly replicas: Replica[] = [];
  readonly #spec: FleetSpec;

  constructor(spec: FleetSpec) {
    this.#spec = spec;
  }

  /** Starts replica `name` (with `extra` flags, and `env` in place of the fleet's) and waits until it is ready. */
  async start(name: string, extra: readonly string[] = [], env?: NodeJS.ProcessEnv): Promise<Replica> {
    const server = await spawnDevServer({
      image: TEST_IMAGE,
      instanceId: this.#spec.instanceId,
      flags: ['--fleet', '--replica-id', name, ...(this.#spec.flags?.(name) ?? []), ...extra],
      env: env ?? this.#spec.env,
      logLevel: this.#spec.logLevel ?? 'info',
      stderr: this.#spec.stderr ?? 'capture',
    });
    const r = Object.assign(server, { name });
    // Listed before it is ready: one that never gets there is killed by `cleanUp` too.
    this.replicas.push(r);
    await r.ready();
    return r;
  }

  /**
   * Replicas `names`, started at once with the fleet's flags and environment, in that order;
   * `cleanUp` registered with `t.after` first, so that one that fails to start is ended too.
   */
  begin<const N extends readonly string[]>(t: TestContext, ...names: N): Promise<ReplicasOf<N>> {
    t.after(this.cleanUp);
    return Promise.all(names.map((name) => this.start(name))) as Promise<ReplicasOf<N>>;
  }

  /**
   * For `t.after` (a bound function): every replica's log under FLEET_TEST_LOGS=1, to see why a
   * case failed; the replicas SIGKILLed; their containers removed.
   */
  readonly cleanUp = async (): Promise<void> => {
    // An inherited stderr was shown as it came: nothing kept to show again.
    const kept = (this.#spec.stderr ?? 'capture') === 'capture';
    if (process.env.FLEET_TEST_LOGS && kept)
      for (const r of this.replicas) console.error(`--- replica ${r.name}\n${r.stderr()}`);
    // Each waited for: a replica still dying could make a container after the removal.
    await Promise.all(this.replicas.map((r) => r.kill()));
    await (this.#spec.removeContainers ?? (() => removeInstanceContainers(this.#spec.instanceId)))();
  };
}
