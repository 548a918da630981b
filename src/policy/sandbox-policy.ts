/**
 * Session sandbox and approval policy (their wire shapes are in src/protocol/session.ts) and
 * their resolution into the concrete sandbox a backend enforces for one attempt.
 */
import { posix } from 'node:path';
import type { ResolvedSandbox } from '../backends/types.ts';
import type { ApprovalPolicy, SandboxPolicy } from '../protocol/index.ts';
import { isWithin } from '../path-within.ts';

export type { ApprovalPolicy, SandboxPolicy } from '../protocol/index.ts';

/** The policy part of a session, fixed at creation. */
export interface SessionPolicy {
  readonly sandbox: SandboxPolicy;
  readonly denyRead: readonly string[];
  readonly approvalPolicy: ApprovalPolicy;
  readonly strictAutoReview: boolean;
  /** `report`: never retry on the server, always report `sandboxDenied` (the client decides). */
  readonly denialHandling: 'server' | 'report';
}

/**
 * A narrowing a client asks for on one start (Codex's `sandbox` permissions profile).
 * It can only take rights away from the session policy, never add them.
 */
export interface SandboxNarrowing {
  /** Writable roots the client allows; intersected with the session's. `[]` = read-only. */
  readonly writableRoots?: readonly string[] | undefined;
  readonly denyRead?: readonly string[] | undefined;
  readonly network?: boolean | undefined;
}

/**
 * Writable roots of a policy for a session whose workspace is `workdir` (or whose workspaces are,
 * the first the session's own: the local backend adds the client's working directory): the
 * workspaces, `/tmp` unless excluded, and the extra roots. Empty for read-only; undefined for
 * full access.
 */
export function writableRoots(policy: SandboxPolicy, workdir: string | readonly string[]): string[] | undefined {
  const workdirs = typeof workdir === 'string' ? [workdir] : workdir;
  switch (policy.type) {
    case 'danger-full-access':
      return undefined;
    case 'read-only':
      return [];
    case 'workspace-write':
      return [...workdirs, ...(policy.excludeSlashTmp ? [] : ['/tmp']), ...(policy.writableRoots ?? [])].map((p) =>
        posix.normalize(p),
      );
  }
}

/** The sandbox of a sandboxed attempt, with the client's narrowing applied on top. */
export function resolveSandbox(
  policy: SessionPolicy,
  workdir: string | readonly string[],
  narrowing?: SandboxNarrowing,
): ResolvedSandbox {
  const roots = writableRoots(policy.sandbox, workdir);
  if (roots === undefined && !narrowing) return { kind: 'unrestricted' };
  const sessionNetwork = policy.sandbox.type === 'danger-full-access' ? true : policy.sandbox.networkAccess === true;
  let writable = roots ?? ['/'];
  if (narrowing?.writableRoots) {
    const asked = narrowing.writableRoots.map((p) => posix.normalize(p));
    // Keep what both allow: an asked root inside a session root, or a session root inside an asked one.
    writable = [
      ...asked.filter((a) => writable.some((r) => isWithin(a, r))),
      ...writable.filter((r) => asked.some((a) => isWithin(r, a) && r !== a)),
    ];
  }
  return {
    kind: 'restricted',
    writableRoots: [...new Set(writable)],
    denyRead: [...new Set([...policy.denyRead, ...(narrowing?.denyRead ?? [])])],
    network: sessionNetwork && narrowing?.network !== false,
  };
}

/** The workspaces of a backend session: its own, then the client's (local) that joined it. */
export function sessionWorkspaces(backend: {
  readonly workdir: string;
  readonly clientWorkspaces?: readonly string[] | undefined;
}): readonly string[] {
  return backend.clientWorkspaces?.length ? [backend.workdir, ...backend.clientWorkspaces] : [backend.workdir];
}

/** Whether `path` (absolute, canonical) may be written under `sandbox`. */
export function canWrite(sandbox: ResolvedSandbox, path: string): boolean {
  if (sandbox.kind === 'unrestricted') return true;
  return sandbox.writableRoots.some((root) => isWithin(path, root)) && canRead(sandbox, path);
}

/** Whether `path` (absolute, canonical) may be read under `sandbox` (deny-read applies). */
export function canRead(sandbox: ResolvedSandbox, path: string): boolean {
  if (sandbox.kind === 'unrestricted') return true;
  return !sandbox.denyRead.some((denied) => isWithin(path, denied));
}

/** Whether anything in the tree under `dir` is deny-read (a recursive copy or listing must not expose it). */
export function containsDenied(sandbox: ResolvedSandbox, dir: string): boolean {
  return sandbox.kind === 'restricted' && sandbox.denyRead.some((denied) => isWithin(denied, dir));
}

/**
 * A sandboxed attempt's TMPDIR points inside a writable root (`/tmp` when writable, else the
 * first root), never at whatever the server or the client's environment named; with no
 * writable root at all (read-only) it is unset.
 */
export function sandboxedEnvironment(
  env: Readonly<Record<string, string>>,
  sandbox: ResolvedSandbox,
): Readonly<Record<string, string>> {
  if (sandbox.kind !== 'restricted') return env;
  const { TMPDIR: _ignored, ...rest } = env;
  const tmp = sandbox.writableRoots.includes('/tmp') ? '/tmp' : sandbox.writableRoots[0];
  return tmp === undefined ? rest : { ...rest, TMPDIR: tmp };
}
