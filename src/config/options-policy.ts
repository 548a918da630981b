/**
 * Options of the server: the sandbox and approval defaults, and the resources a session gets and
 * may ask for. One part of the option table that
 * src/config.ts puts together in this order (the order of `--help` and docs/guide.md).
 */
import { availableParallelism } from 'node:os';
import type { OptionDef } from './option-def.ts';

/** Half the CPUs this host has, at least one: a session's default limit stays below the host's. */
function defaultSessionCpus(): number {
  return Math.max(1, Math.floor(availableParallelism() / 2));
}

/** Sandbox and approval defaults, and the resources a session gets and may ask for (one part of the option table). */
export const POLICY_OPTIONS = {
  sandbox: {
    flag: 'sandbox',
    env: 'EXEC_SERVER_SANDBOX',
    kind: 'enum',
    values: ['workspace-write', 'read-only', 'danger-full-access'],
    default: 'workspace-write',
    description: 'Default sandbox policy of new sessions.',
  },
  allowedSandboxTypes: {
    flag: 'allowed-sandbox-types',
    env: 'EXEC_SERVER_ALLOWED_SANDBOX_TYPES',
    kind: 'string',
    default: undefined,
    description:
      'Sandbox types sessions may ask for, comma-separated: `TYPE` for every tenant, `TENANT:TYPE` for one more (`read-only,workspace-write,ops:danger-full-access`); anything else is refused with 403 `EXEC_ERR_SANDBOX_TYPE_FORBIDDEN`, and so is running a command outside the sandbox (escalation) where `danger-full-access` is not allowed. Default: every type.',
  },
  localHostDirs: {
    flag: 'local-host-dirs',
    env: 'EXEC_SERVER_LOCAL_HOST_DIRS',
    kind: 'string',
    default: undefined,
    description:
      "Local backend: host directories, comma-separated absolute paths, in which a tenant not allowed `danger-full-access` (`--allowed-sandbox-types`) may name its session's workdir and writable roots, and have a Codex client's working directory made a workspace; anything else it names is refused with 403 `EXEC_ERR_HOST_DIR_FORBIDDEN`. Default: none (such tenants work in the server's workspaces). Tenants allowed `danger-full-access` may name any directory.",
  },
  approvalPolicy: {
    flag: 'approval-policy',
    env: 'EXEC_SERVER_APPROVAL_POLICY',
    kind: 'enum',
    values: ['untrusted', 'on-failure', 'on-request', 'never'],
    default: 'on-request',
    description: 'Default approval policy of new sessions.',
  },
  denialHandling: {
    flag: 'denial-handling',
    env: 'EXEC_SERVER_DENIAL_HANDLING',
    kind: 'enum',
    values: ['auto', 'server', 'report'],
    default: 'auto',
    description:
      'Who decides on a sandbox denial: `server` (the gate may retry unsandboxed), `report` (always report `sandboxDenied`, the client decides), `auto` (report for Codex clients, server otherwise).',
  },
  memoryMb: {
    flag: 'memory-mb',
    env: 'EXEC_SERVER_MEMORY_MB',
    kind: 'int',
    default: 2048,
    min: 16,
    max: 1024 * 1024,
    description: 'Default container memory limit (docker).',
  },
  maxMemoryMb: {
    flag: 'max-memory-mb',
    env: 'EXEC_SERVER_MAX_MEMORY_MB',
    kind: 'int',
    default: 8192,
    min: 16,
    max: 1024 * 1024,
    description: 'Largest memory limit a session may ask for.',
  },
  cpus: {
    flag: 'cpus',
    env: 'EXEC_SERVER_CPUS',
    kind: 'int',
    default: defaultSessionCpus(),
    min: 1,
    max: 1024,
    description:
      "Default container CPU limit (docker); default half the host's CPUs, at least 1, so that one busy session leaves CPU to the others.",
  },
  maxCpus: {
    flag: 'max-cpus',
    env: 'EXEC_SERVER_MAX_CPUS',
    kind: 'int',
    default: 4,
    min: 1,
    max: 1024,
    description: 'Largest CPU limit a session may ask for.',
  },
  pids: {
    flag: 'pids',
    env: 'EXEC_SERVER_PIDS',
    kind: 'int',
    default: 512,
    min: 8,
    max: 1_000_000,
    description: 'Default container pids limit.',
  },
  maxPids: {
    flag: 'max-pids',
    env: 'EXEC_SERVER_MAX_PIDS',
    kind: 'int',
    default: 4096,
    min: 8,
    max: 1_000_000,
    description: 'Largest pids limit a session may ask for.',
  },
  diskMb: {
    flag: 'disk-mb',
    env: 'EXEC_SERVER_DISK_MB',
    kind: 'int',
    default: 10_240,
    min: 16,
    max: 64 * 1024 * 1024,
    description:
      "Default disk limit of a session, in MiB: its container's writable layer (docker; by the engine where it can, overlay2 on xfs with project quotas, else by the disk watch), its workspace and private /tmp (local, by the disk watch).",
  },
  maxDiskMb: {
    flag: 'max-disk-mb',
    env: 'EXEC_SERVER_MAX_DISK_MB',
    kind: 'int',
    default: 102_400,
    min: 16,
    max: 64 * 1024 * 1024,
    description: 'Largest disk limit a session may ask for.',
  },
  diskWatchSeconds: {
    flag: 'disk-watch-seconds',
    env: 'EXEC_SERVER_DISK_WATCH_SECONDS',
    kind: 'int',
    default: 30,
    min: 1,
    max: 3600,
    description:
      "Where the engine does not enforce the disk limit: how often a session's disk use is measured; past its limit its processes are ended and new ones refused until files are removed.",
  },
} as const satisfies Record<string, OptionDef>;
