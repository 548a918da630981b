/**
 * The hardened container every session runs in. One function builds the create options so the
 * hardening is reviewed in one place (and read back by test/docker/session.test.ts).
 */
import type Docker from 'dockerode';

/**
 * Capabilities root-in-container keeps after `CapDrop: ALL` (each justified in
 * docs/docker-backend.md): the container-user sandbox preparation needs CHOWN and FOWNER;
 * DAC_OVERRIDE lets the unsandboxed (root) attempt write into the sandbox user's writable roots;
 * KILL lets root signal process groups that changed uid; SETUID/SETGID let root tools drop
 * privileges (package managers, su). Everything else (NET_RAW, MKNOD, SYS_CHROOT, AUDIT_WRITE,
 * NET_BIND_SERVICE, FSETID, SETFCAP, SETPCAP...) is dropped.
 */
export const KEPT_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'KILL', 'SETUID', 'SETGID'] as const;

/** The exec agent's directory in every container: root's only (the volume of agent-volume.ts, or an upload). */
export const AGENT_DIR = '/.exec-server';

/** tmpfs inside every container for pid files (not committed into snapshots, gone with the container). */
export const CONTROL_DIR = '/run/exec-server';

/**
 * PID 1 is docker-init (`Init: true`, reaps zombies); its child is this loop, which keeps the
 * container alive whatever the image's own CMD is. A loop rather than `sleep infinity` because
 * not every sleep understands `infinity`.
 */
export const KEEPALIVE_CMD = ['/bin/sh', '-c', 'trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done'];

/** The CPU weight of a session container: 1024 per CPU of its limit, within the kernel's range. */
export function cpuShares(cpus: number): number {
  return Math.min(262_144, Math.max(2, Math.round(1024 * cpus)));
}

/** What a session container is made of: image, labels, resources, mounts and network. */
export interface ContainerConfigInput {
  readonly name: string;
  readonly image: string;
  readonly labels: Record<string, string>;
  readonly memoryMb: number;
  readonly cpus: number;
  readonly pids: number;
  readonly network: boolean;
  readonly workdir: string;
  readonly controlTmpfsSize: string;
  /** OCI runtime (`runc`, `runsc`...); undefined leaves the engine's default (runtimes.ts). */
  readonly runtime?: string | undefined;
  /** Size limit of the writable layer in MiB, where the engine enforces one (disk.ts); undefined: none. */
  readonly diskMb?: number | undefined;
  /** The server's agent link directory, bind-mounted read-only at LINK_MOUNT (agent-link.ts). */
  readonly agentLinkDir?: string | undefined;
  /** The engine's exec-agent volume, mounted read-only at the agent's directory (agent-volume.ts). */
  readonly agentVolume?: string | undefined;
}

/**
 * Where the server's agent link directory is mounted, read-only (agent-link.ts): inside the
 * root-only control directory, so the sandbox user cannot reach it whatever the host's uids.
 */
export const LINK_MOUNT = `${CONTROL_DIR}/r/link`;
/** Where servers before agent links mounted a directory the agent made its socket in (writable). */
export const LEGACY_AGENT_MOUNT = `${CONTROL_DIR}/a`;

/** The create options of a hardened session container, all in one place to review. */
export function buildContainerConfig(input: ContainerConfigInput): Docker.ContainerCreateOptions {
  return {
    name: input.name,
    Image: input.image,
    Cmd: KEEPALIVE_CMD,
    Entrypoint: [],
    // The engine makes the workdir (root's, 0755, as `mkdir -p` would) at create: no setup exec for it.
    WorkingDir: input.workdir,
    User: '0:0',
    Labels: input.labels,
    Tty: false,
    OpenStdin: false,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    NetworkDisabled: !input.network,
    HostConfig: {
      Init: true,
      ...(input.runtime !== undefined ? { Runtime: input.runtime } : {}),
      Privileged: false,
      CapDrop: ['ALL'],
      CapAdd: [...KEPT_CAPABILITIES],
      SecurityOpt: ['no-new-privileges'],
      NetworkMode: input.network ? 'bridge' : 'none',
      Memory: input.memoryMb * 1024 * 1024,
      // Same as Memory: no swap on top of the limit.
      MemorySwap: input.memoryMb * 1024 * 1024,
      NanoCpus: Math.round(input.cpus * 1e9),
      // Under contention sessions share CPU in proportion to their limits (1024 per CPU is the
      // engine's weight of a container that sets none), whatever the engine's defaults are.
      CpuShares: cpuShares(input.cpus),
      PidsLimit: input.pids,
      // Only where the engine can apply it (disk.ts): it refuses the whole create otherwise.
      ...(input.diskMb !== undefined ? { StorageOpt: { size: `${input.diskMb}m` } } : {}),
      Binds: [],
      // A bind that the engine refuses when its host lacks the source (a `Binds` entry would
      // create it there instead, hiding that the directory is not shared). Read-only: the
      // server listens there, and the container must never be able to replace what it opens.
      Mounts: [
        ...(input.agentLinkDir === undefined
          ? []
          : [{ Type: 'bind' as const, Source: input.agentLinkDir, Target: LINK_MOUNT, ReadOnly: true }]),
        ...(input.agentVolume === undefined
          ? []
          : [{ Type: 'volume' as const, Source: input.agentVolume, Target: AGENT_DIR, ReadOnly: true }]),
      ],
      // The pid directories as tmpfs of their own, with their modes, made with the container
      // (the layout SETUP_SCRIPT would make: root-only, and sticky and unlistable for the sandbox user).
      Tmpfs: {
        [CONTROL_DIR]: `rw,nosuid,nodev,noexec,mode=755,size=${input.controlTmpfsSize}`,
        [`${CONTROL_DIR}/r`]: `rw,nosuid,nodev,noexec,mode=700,size=${input.controlTmpfsSize}`,
        [`${CONTROL_DIR}/u`]: `rw,nosuid,nodev,noexec,mode=1733,size=${input.controlTmpfsSize}`,
      },
      RestartPolicy: { Name: 'no' },
      AutoRemove: false,
      ReadonlyRootfs: false,
      IpcMode: 'private',
      LogConfig: { Type: 'none', Config: {} },
    },
  };
}
