/**
 * `--fleet`, `--replica-id`, `--advertise-url`: who this replica is in a fleet (docs/architecture.md,
 * "Fleet"). Without `--fleet` the server is alone with its instance id, exactly as before.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { ConfigError } from './config-error.ts';
import { parseListen } from './listen.ts';

/** What the other replicas know of this one (kept in its replica lease). */
export interface FleetIdentity {
  readonly replicaId: string;
  /** `http://HOST:PORT`: where the other replicas forward requests for this replica's sessions. */
  readonly advertiseUrl: string;
}

/** A replica id: a container name part (the lease is named after it). */
export const REPLICA_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

/** One random id per process when none is given (a restarted process is a new replica). */
const RANDOM_REPLICA_ID = `r-${randomBytes(4).toString('hex')}`;

interface FleetOptions {
  readonly fleet: boolean;
  readonly replicaId: string | undefined;
  readonly advertiseUrl: string | undefined;
  readonly listen: string;
}

/** This replica's identity, or undefined without `--fleet`; throws ConfigError on a bad value. */
export function fleetIdentity(config: FleetOptions): FleetIdentity | undefined {
  if (!config.fleet) {
    if (config.replicaId !== undefined || config.advertiseUrl !== undefined)
      throw new ConfigError('--replica-id and --advertise-url apply with --fleet only');
    return undefined;
  }
  const replicaId = config.replicaId ?? RANDOM_REPLICA_ID;
  if (!REPLICA_ID.test(replicaId))
    throw new ConfigError(
      `--replica-id: ${JSON.stringify(replicaId)} must be letters, digits and _.- (at most 63, starting with a letter or digit)`,
    );
  if (config.advertiseUrl !== undefined) {
    let url: URL;
    try {
      url = new URL(config.advertiseUrl);
    } catch {
      throw new ConfigError(`--advertise-url: ${JSON.stringify(config.advertiseUrl)} is not a URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new ConfigError(`--advertise-url: expected http://HOST:PORT, got ${JSON.stringify(config.advertiseUrl)}`);
    return { replicaId, advertiseUrl: url.origin };
  }
  const { host, port } = parseListen(config.listen);
  if (port === 0)
    throw new ConfigError(
      '--fleet: --listen has port 0, so the other replicas cannot reach this one: give a fixed port or --advertise-url',
    );
  const reachable = host === '0.0.0.0' || host === '::' ? hostname() : host;
  return { replicaId, advertiseUrl: `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}` };
}
