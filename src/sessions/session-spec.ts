/**
 * The resolution of a session spec (`initialize.session`, `POST /v1/sessions`; its schema is
 * src/protocol/session.ts) against the server's defaults and maxima, and the record a session
 * keeps for recovery.
 */
import { Compile } from 'typebox/compile';
import type { Config } from '../config.ts';
import { execError } from '../errors.ts';
import type { SandboxPolicy, SessionPolicy } from '../policy/sandbox-policy.ts';
import {
  ExposedPortSchema,
  SessionSpecSchema,
  toFieldPath,
  type ExposedPort,
  type SessionSpec,
} from '../protocol/index.ts';
import { parseAllowList, type AllowEntry } from '../egress/allow-list.ts';

export type { SessionSpec } from '../protocol/index.ts';

/** A spec with every default applied and every maximum enforced. */
export interface ResolvedSessionSpec {
  readonly image?: string | undefined;
  readonly snapshot?: string | undefined;
  readonly workdir?: string | undefined;
  readonly env: Record<string, string>;
  readonly labels: Record<string, string>;
  readonly policy: SessionPolicy;
  readonly resources: { memoryMb: number; cpus: number; pids: number; diskMb: number };
  /** OCI runtime asked for (docker); undefined: the server's default. */
  readonly runtime?: string | undefined;
  readonly idleTimeoutSeconds: number;
  readonly maxLifetimeSeconds: number;
  /** Whether ports of the session may be exposed (src/preview/). */
  readonly previewPorts: boolean;
  /** `network.allow` as given, and parsed (src/egress/); undefined: no egress proxy. */
  readonly network?: { readonly allow: readonly string[]; readonly entries: readonly AllowEntry[] } | undefined;
}

function capped(name: string, value: number | undefined, dflt: number, max: number): number {
  if (value === undefined) return dflt;
  if (value > max)
    throw execError('EXEC_ERR_INVALID_PARAMS', `session.${name} ${value} exceeds the server maximum ${max}`, {
      detail: { field: `session.${name}` },
    });
  return value;
}

/** A client's spec with the server's defaults and maxima applied: what the session is made with. */
export function resolveSessionSpec(
  spec: SessionSpec,
  config: Config,
  denialHandling: 'server' | 'report',
): ResolvedSessionSpec {
  const sandbox: SandboxPolicy = spec.sandbox ?? { type: config.sandbox };
  const normalizedSandbox: SandboxPolicy =
    sandbox.type === 'workspace-write' && sandbox.writableRoots
      ? {
          ...sandbox,
          writableRoots: sandbox.writableRoots.map((r, i) => toFieldPath(r, `session.sandbox.writableRoots[${i}]`)),
        }
      : sandbox;
  return {
    image: spec.image,
    snapshot: spec.snapshot,
    runtime: spec.runtime,
    workdir: spec.workdir === undefined ? undefined : toFieldPath(spec.workdir, 'session.workdir'),
    env: spec.env ?? {},
    labels: spec.labels ?? {},
    policy: {
      sandbox: normalizedSandbox,
      denyRead: (spec.denyRead ?? []).map((d, i) => toFieldPath(d, `session.denyRead[${i}]`)),
      approvalPolicy: spec.approvalPolicy ?? config.approvalPolicy,
      strictAutoReview: spec.strictAutoReview ?? false,
      denialHandling,
    },
    resources: {
      memoryMb: capped('resources.memoryMb', spec.resources?.memoryMb, config.memoryMb, config.maxMemoryMb),
      cpus: capped('resources.cpus', spec.resources?.cpus, config.cpus, config.maxCpus),
      pids: capped('resources.pids', spec.resources?.pids, config.pids, config.maxPids),
      diskMb: capped('resources.diskMb', spec.resources?.diskMb, config.diskMb, config.maxDiskMb),
    },
    idleTimeoutSeconds: capped(
      'idleTimeoutSeconds',
      spec.idleTimeoutSeconds,
      config.idleTimeoutSeconds,
      config.maxLifetimeSeconds,
    ),
    maxLifetimeSeconds: capped(
      'maxLifetimeSeconds',
      spec.maxLifetimeSeconds,
      config.maxLifetimeSeconds,
      config.maxLifetimeSeconds,
    ),
    previewPorts: spec.previewPorts ?? false,
    network:
      spec.network === undefined
        ? undefined
        : { allow: [...spec.network.allow], entries: parseAllowList(spec.network.allow) },
  };
}

/**
 * Refuses a sandbox type the tenant may not ask for (`--allowed-sandbox-types`): 403
 * `EXEC_ERR_SANDBOX_TYPE_FORBIDDEN`, naming the allowed types.
 */
export function checkSandboxType(type: string, allowed: readonly string[], what = `sandbox type ${type}`): void {
  if (allowed.includes(type)) return;
  throw execError(
    'EXEC_ERR_SANDBOX_TYPE_FORBIDDEN',
    `${what} is not allowed on this server; allowed sandbox types: ${allowed.length > 0 ? allowed.join(', ') : '(none)'} (see --allowed-sandbox-types)`,
    { detail: { field: 'session.sandbox.type', allowed: [...allowed] } },
  );
}

/**
 * What a session keeps for recovery (`BackendSession.persistRecord`): its resolved spec with
 * every value explicit (so later changes of the server defaults do not change it), without `env`
 * (values may be secrets; a re-adopted session starts without its session variables).
 */
export function sessionRecord(
  spec: ResolvedSessionSpec,
  revokedTokens: ReadonlyArray<readonly [string, number]> = [],
  exposedPorts: readonly ExposedPort[] = [],
  approvedCommands: readonly string[] = [],
): string {
  const explicit: SessionSpec = {
    ...(spec.image !== undefined ? { image: spec.image } : {}),
    ...(spec.snapshot !== undefined ? { snapshot: spec.snapshot } : {}),
    ...(spec.runtime !== undefined ? { runtime: spec.runtime } : {}),
    ...(spec.workdir !== undefined ? { workdir: spec.workdir } : {}),
    labels: spec.labels,
    sandbox: spec.policy.sandbox,
    denyRead: [...spec.policy.denyRead],
    approvalPolicy: spec.policy.approvalPolicy,
    strictAutoReview: spec.policy.strictAutoReview,
    resources: spec.resources,
    idleTimeoutSeconds: spec.idleTimeoutSeconds,
    maxLifetimeSeconds: spec.maxLifetimeSeconds,
    previewPorts: spec.previewPorts,
    ...(spec.network !== undefined ? { network: { allow: [...spec.network.allow] } } : {}),
  };
  return JSON.stringify({
    version: 1,
    spec: explicit,
    denialHandling: spec.policy.denialHandling,
    ...(revokedTokens.length > 0 ? { revokedTokens } : {}),
    ...(exposedPorts.length > 0 ? { exposedPorts } : {}),
    ...(approvedCommands.length > 0 ? { approvedCommands } : {}),
  });
}

/** A field of a stored record's JSON; undefined when the record is missing or unreadable. */
function recordField(record: string | undefined, name: string): unknown {
  if (record === undefined) return undefined;
  try {
    return (JSON.parse(record) as Record<string, unknown>)[name];
  } catch {
    return undefined;
  }
}

const checkPort = Compile(ExposedPortSchema);

/** The preview ports a stored record lists as exposed; none when unreadable. */
export function exposedPortsOf(record: string | undefined): ExposedPort[] {
  const list = recordField(record, 'exposedPorts');
  return Array.isArray(list) ? list.filter((e): e is ExposedPort => checkPort.Check(e)) : [];
}

/** The session tokens a stored record lists as revoked (`[tokenId, expiresAt]`); none when unreadable. */
export function revokedTokensOf(record: string | undefined): Array<[string, number]> {
  const list = recordField(record, 'revokedTokens');
  if (!Array.isArray(list)) return [];
  return list.filter(
    (e): e is [string, number] =>
      Array.isArray(e) && e.length === 2 && typeof e[0] === 'string' && typeof e[1] === 'number',
  );
}

/**
 * The `approved-for-session` keys a stored record lists (approvalKey digests, oldest first); none
 * when unreadable. Anything but a digest is dropped: the record is readable by the container's root.
 */
export function approvedCommandsOf(record: string | undefined): string[] {
  const list = recordField(record, 'approvedCommands');
  if (!Array.isArray(list)) return [];
  return list.filter((e): e is string => typeof e === 'string' && /^[A-Za-z0-9_-]{43}$/.test(e));
}

const checkSpec = Compile(SessionSpecSchema);

/** The spec of a stored record, or undefined when the record is missing or not ours. */
export function fromSessionRecord(record: string | undefined, config: Config): ResolvedSessionSpec | undefined {
  if (record === undefined) return undefined;
  try {
    const parsed = JSON.parse(record) as { version?: unknown; spec?: unknown; denialHandling?: unknown };
    if (parsed.version !== 1 || !checkSpec.Check(parsed.spec)) return undefined;
    const handling =
      parsed.denialHandling === 'report' ? 'report' : parsed.denialHandling === 'server' ? 'server' : undefined;
    return handling === undefined ? undefined : resolveSessionSpec(parsed.spec, config, handling);
  } catch {
    return undefined;
  }
}
