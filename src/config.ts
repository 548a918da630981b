/**
 * Server configuration: one table of options, each settable by flag and by `EXEC_SERVER_*`
 * variable (flag wins), validated at boot. The same table prints `--help` and backs the
 * configuration table of docs/guide.md, so they cannot drift apart.
 */
import { parseArgs } from 'node:util';
import { isAbsolute, posix } from 'node:path';

import type { OptionDef } from './config/option-def.ts';
import { DOCKER_OPTIONS } from './config/options-docker.ts';
import { fleetIdentity } from './config/fleet.ts';
import { LIMIT_OPTIONS } from './config/options-limits.ts';
import { POLICY_OPTIONS } from './config/options-policy.ts';
import { SERVER_OPTIONS } from './config/options-server.ts';
import { ConfigError } from './config/config-error.ts';
import { dockerHostList, parseDockerHost } from './config/docker-host.ts';
import { commaEntries, commaList } from './config/lists.ts';
import { isLoopback, parseListen } from './config/listen.ts';
import { checkRuntimeName, runtimeList, warmPoolRuntimes } from './config/runtimes.ts';
import { warmPoolTemplates } from './config/template-pools.ts';

// The grammars live in src/config/, one module each; re-exported for the server's callers.
export { ConfigError } from './config/config-error.ts';
export { dockerHostList, parseDockerHost, type DockerHostAddress } from './config/docker-host.ts';
export { isLoopback, parseListen, type ListenAddress } from './config/listen.ts';
export { runtimeList, warmPoolRuntimes } from './config/runtimes.ts';
export { warmPoolTemplates } from './config/template-pools.ts';

/** Checks one Docker engine address (src/config/docker-host.ts), so a typo stops the server at boot. */
export function checkDockerHost(value: string, where: string): void {
  parseDockerHost(value, where);
}

/**
 * Longest `--docker-agent-socket-dir`: the agent's socket sits two short directories below it
 * (the instance's, the container's) and its lock file beside it, within `sun_path`'s 108 bytes.
 */
const MAX_SOCKET_DIR_LENGTH = 60;

/** Every option the server understands. Order is the order of `--help` and of docs/guide.md's table. */
export const OPTIONS = { ...SERVER_OPTIONS, ...LIMIT_OPTIONS, ...POLICY_OPTIONS, ...DOCKER_OPTIONS } as const;

type Options = typeof OPTIONS;
type ValueOf<D> = D extends { kind: 'int' }
  ? number
  : D extends { kind: 'bool' }
    ? boolean
    : D extends { kind: 'enum'; values: readonly (infer V)[] }
      ? V
      : string;
type WithDefault<D> = D extends { default: undefined } ? ValueOf<D> | undefined : ValueOf<D>;

/** The smallest size a rotated audit log file may be given: 16 of its longest lines. */
const MIN_AUDIT_FILE_BYTES = 1024 * 1024;

/** The validated configuration. */
export type Config = { -readonly [K in keyof Options]: WithDefault<Options[K]> };

function coerce(name: string, def: OptionDef, raw: string | boolean): string | number | boolean {
  const where = `--${def.flag} / ${def.env}`;
  switch (def.kind) {
    case 'bool': {
      if (typeof raw === 'boolean') return raw;
      if (/^(1|true|yes|on)$/i.test(raw)) return true;
      if (/^(0|false|no|off|)$/i.test(raw)) return false;
      throw new ConfigError(`${where}: expected a boolean (true/false), got ${JSON.stringify(raw)}`);
    }
    case 'int': {
      const s = String(raw).trim();
      if (!/^-?\d+$/.test(s)) throw new ConfigError(`${where}: expected an integer, got ${JSON.stringify(raw)}`);
      const n = Number(s);
      if (def.min !== undefined && n < def.min)
        throw new ConfigError(`${where}: must be at least ${def.min}, got ${n}`);
      if (def.max !== undefined && n > def.max) throw new ConfigError(`${where}: must be at most ${def.max}, got ${n}`);
      return n;
    }
    case 'enum': {
      const s = String(raw);
      if (!def.values?.includes(s))
        throw new ConfigError(`${where}: expected one of ${def.values?.join(', ')}, got ${JSON.stringify(s)}`);
      return s;
    }
    case 'string': {
      const s = String(raw);
      if (s === '') throw new ConfigError(`${where}: must not be empty`);
      void name;
      return s;
    }
  }
}

/**
 * `--flag VALUE` becomes `--flag=VALUE` for every option that takes a value, so a value that
 * starts with `-` (`--max-sessions -3`) reaches validation instead of parseArgs' "ambiguous".
 */
function joinValues(argv: readonly string[]): string[] {
  const takesValue = new Set(
    (Object.values(OPTIONS) as OptionDef[]).filter((d) => d.kind !== 'bool').map((d) => `--${d.flag}`),
  );
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    if (takesValue.has(arg) && next !== undefined) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/**
 * Builds the configuration from argv and environment. Throws `ConfigError` naming the first
 * bad value; unknown flags are errors too (a typo must not silently fall back to a default).
 */
export function loadConfig(argv: readonly string[], env: NodeJS.ProcessEnv): Config {
  const parseOptions: Record<string, { type: 'string' | 'boolean' }> = {};
  for (const def of Object.values(OPTIONS) as OptionDef[])
    parseOptions[def.flag] = { type: def.kind === 'bool' ? 'boolean' : 'string' };
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args: joinValues(argv), options: parseOptions, strict: true, allowPositionals: false })
      .values as Record<string, string | boolean | undefined>;
  } catch (err) {
    const message = (err as Error).message;
    if (/^Unexpected argument/.test(message))
      throw new ConfigError(
        `${message.replace(/\. This command.*$/, '')}: the server takes only --flag VALUE options (client commands: run, shell, sessions, cp, mcp; see --help)`,
      );
    throw new ConfigError(message);
  }
  const out: Record<string, unknown> = {};
  for (const [name, def] of Object.entries(OPTIONS) as [string, OptionDef][]) {
    let raw: string | boolean | undefined = values[def.flag] ?? env[def.env];
    if (raw === undefined && name === 'token') raw = env['CODEX_EXEC_SERVER_CONNECTION_TOKEN'];
    if (raw === undefined && name === 'dockerHost') raw = env['DOCKER_HOST'];
    out[name] = raw === undefined ? def.default : coerce(name, def, raw);
  }
  const config = out as Config;
  if (config.dockerHost !== undefined) {
    const where =
      values['docker-host'] !== undefined
        ? '--docker-host'
        : env['EXEC_SERVER_DOCKER_HOST'] !== undefined
          ? 'EXEC_SERVER_DOCKER_HOST'
          : 'DOCKER_HOST';
    dockerHostList(config.dockerHost, where);
  }
  const listen = parseListen(config.listen);
  if (config.maxMemoryMb < config.memoryMb)
    throw new ConfigError(`--max-memory-mb (${config.maxMemoryMb}) is below --memory-mb (${config.memoryMb})`);
  if (config.maxCpus < config.cpus)
    throw new ConfigError(`--max-cpus (${config.maxCpus}) is below --cpus (${config.cpus})`);
  if (config.maxPids < config.pids)
    throw new ConfigError(`--max-pids (${config.maxPids}) is below --pids (${config.pids})`);
  if (config.maxDiskMb < config.diskMb)
    throw new ConfigError(`--max-disk-mb (${config.maxDiskMb}) is below --disk-mb (${config.diskMb})`);
  // A file is rotated only between lines: it must hold the longest line (MAX_LINE_BYTES) with room.
  if (config.auditLogMaxBytes !== 0 && config.auditLogMaxBytes < MIN_AUDIT_FILE_BYTES)
    throw new ConfigError(
      `--audit-log-max-bytes / EXEC_SERVER_AUDIT_LOG_MAX_BYTES: must be 0 (never rotate) or at least ${MIN_AUDIT_FILE_BYTES}, got ${config.auditLogMaxBytes}`,
    );
  const socketDir = config.dockerAgentSocketDir;
  if (socketDir !== 'off' && (!isAbsolute(socketDir) || socketDir.length > MAX_SOCKET_DIR_LENGTH))
    throw new ConfigError(
      `--docker-agent-socket-dir: expected \`off\` or an absolute path of at most ${MAX_SOCKET_DIR_LENGTH} characters (a socket's path is limited to 108 bytes), got ${JSON.stringify(socketDir)}`,
    );
  if (config.runtime !== undefined) checkRuntimeName(config.runtime);
  if (config.allowedRuntimes !== undefined) runtimeList(config.allowedRuntimes);
  allowedOriginList(config.allowedOrigins);
  localHostDirList(config.localHostDirs);
  const everyone = sandboxTypeRules(config.allowedSandboxTypes)?.everyone ?? [];
  if (everyone.length > 0 && !everyone.includes(config.sandbox))
    throw new ConfigError(
      `--sandbox ${config.sandbox} (the default of new sessions) is not among --allowed-sandbox-types for every tenant (${everyone.join(', ')})`,
    );
  if (config.warmPoolRuntimes !== undefined) warmPoolRuntimes(config.warmPoolRuntimes);
  if (config.warmPoolTemplates !== undefined) warmPoolTemplates(config.warmPoolTemplates);
  fleetIdentity(config);
  const hasAuth = config.token !== undefined || config.tokens !== undefined || config.tokensFile !== undefined;
  if (!isLoopback(listen.host) && !hasAuth && !config.insecureNoAuth) {
    throw new ConfigError(
      `refusing to listen on non-loopback address ${listen.host} without a token; set --token (or EXEC_SERVER_TOKENS) or pass --insecure-no-auth`,
    );
  }
  return config;
}

/**
 * `--allowed-origins` as a set of serialized origins: comma-separated `scheme://host[:port]`
 * (http or https), nothing else (no path, no wildcard).
 */
export function allowedOriginList(value: string | undefined): ReadonlySet<string> {
  const out = new Set<string>();
  for (const entry of commaEntries(value ?? '')) {
    if (entry === '') continue;
    let url: URL | undefined;
    try {
      url = new URL(entry);
    } catch {
      url = undefined;
    }
    if (
      url === undefined ||
      !['http:', 'https:'].includes(url.protocol) ||
      url.pathname !== '/' ||
      url.search !== '' ||
      url.hash !== '' ||
      url.username !== '' ||
      !/^([a-z0-9-]+\.)*[a-z0-9-]+$|^\[[0-9a-f:.]+\]$/.test(url.hostname)
    )
      throw new ConfigError(
        `--allowed-origins / EXEC_SERVER_ALLOWED_ORIGINS: expected scheme://host[:port] entries, got ${JSON.stringify(entry)}`,
      );
    out.add(url.origin);
  }
  return out;
}

const SANDBOX_TYPES = ['workspace-write', 'read-only', 'danger-full-access'] as const;

/** Which sandbox types each tenant may ask for (`--allowed-sandbox-types`). */
export interface SandboxTypeRules {
  /** Types every tenant may ask for. */
  readonly everyone: readonly string[];
  /** Types one tenant may ask for besides those. */
  readonly byTenant: ReadonlyMap<string, readonly string[]>;
}

/** `--allowed-sandbox-types` parsed; undefined when unset (every type allowed). */
export function sandboxTypeRules(value: string | undefined): SandboxTypeRules | undefined {
  if (value === undefined) return undefined;
  const everyone = new Set<string>();
  const byTenant = new Map<string, Set<string>>();
  for (const entry of commaEntries(value)) {
    if (entry === '') continue;
    const i = entry.lastIndexOf(':');
    const tenant = i < 0 ? undefined : entry.slice(0, i).trim();
    const type = entry.slice(i + 1).trim();
    if (
      !(SANDBOX_TYPES as readonly string[]).includes(type) ||
      (tenant !== undefined && !/^[A-Za-z0-9_.-]{1,64}$/.test(tenant))
    )
      throw new ConfigError(
        `--allowed-sandbox-types / EXEC_SERVER_ALLOWED_SANDBOX_TYPES: expected TYPE or TENANT:TYPE entries (types: ${SANDBOX_TYPES.join(', ')}), got ${JSON.stringify(entry)}`,
      );
    if (tenant === undefined) everyone.add(type);
    else byTenant.set(tenant, new Set([...(byTenant.get(tenant) ?? []), type]));
  }
  return {
    everyone: [...everyone],
    byTenant: new Map([...byTenant].map(([t, types]) => [t, [...types]])),
  };
}

/**
 * `--local-host-dirs` parsed: absolute paths, normalized. A relative entry is a configuration
 * error (it would resolve against wherever the server happened to start).
 */
export function localHostDirList(value: string | undefined): string[] {
  return commaList(value).map((e) => {
    if (!isAbsolute(e))
      throw new ConfigError(
        `--local-host-dirs / EXEC_SERVER_LOCAL_HOST_DIRS: expected absolute paths, got ${JSON.stringify(e)}`,
      );
    return posix.resolve(e);
  });
}

/**
 * The host directories `tenant`'s local sessions may name (`--local-host-dirs`), or undefined
 * (anywhere) for a tenant allowed `danger-full-access`, which could reach them outside the sandbox.
 */
export function hostDirsFor(config: Config, tenant: string): readonly string[] | undefined {
  const types = allowedSandboxTypes(sandboxTypeRules(config.allowedSandboxTypes), tenant);
  return types.includes('danger-full-access') ? undefined : localHostDirList(config.localHostDirs);
}

/** The sandbox types `tenant` may ask for under `rules` (undefined rules: all of them). */
export function allowedSandboxTypes(rules: SandboxTypeRules | undefined, tenant: string): readonly string[] {
  if (rules === undefined) return SANDBOX_TYPES;
  const own = rules.byTenant.get(tenant) ?? [];
  return SANDBOX_TYPES.filter((t) => rules.everyone.includes(t) || own.includes(t));
}

/**
 * `argv` with the values of secret options (tokens) replaced, and which flags carried one.
 * The server shows the result as its command line: whatever runs on the host, sandboxed
 * commands without their own PID namespace included, can read a process's command line.
 */
export function redactSecretFlags(argv: readonly string[]): { argv: string[]; flags: string[] } {
  const secret = new Set((Object.values(OPTIONS) as OptionDef[]).filter((d) => d.secret).map((d) => `--${d.flag}`));
  const out: string[] = [];
  const flags: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const eq = a.indexOf('=');
    const name = eq > 0 ? a.slice(0, eq) : a;
    if (!secret.has(name)) {
      out.push(a);
      continue;
    }
    flags.push(name);
    if (eq > 0) out.push(`${name}=***`);
    else {
      out.push(a, '***');
      i++; // the value is the next argument
    }
  }
  return { argv: out, flags };
}

/** `--help` text, generated from the option table. */
export function helpText(): string {
  const lines = ['Usage: exec-server serve [options]', '', 'Options (each also settable by its environment variable):'];
  for (const def of Object.values(OPTIONS) as OptionDef[]) {
    const dflt = def.default === undefined ? '' : ` (default: ${String(def.default)})`;
    lines.push(`  --${def.flag}  [${def.env}]${dflt}`, `      ${def.description}`);
  }
  return lines.join('\n');
}

/** Markdown table of the options, as docs/guide.md shows it (test/unit/config.test.ts keeps them equal). */
export function markdownTable(): string {
  const rows = ['| Flag | Variable | Default | Meaning |', '|---|---|---|---|'];
  for (const [name, def] of Object.entries(OPTIONS) as [string, OptionDef][]) {
    const dflt =
      name === 'workspaceRoot'
        ? '`/var/lib/exec-server/workspaces` as root, else `$XDG_STATE_HOME/exec-server/workspaces` (`$TMPDIR/exec-server-<uid>/workspaces` where that cannot be made)'
        : name === 'dockerAgentSocketDir'
          ? '`$TMPDIR/exec-server-agents-<uid>`'
          : name === 'cpus'
            ? "half the host's CPUs (at least 1)"
            : def.default === undefined
              ? '(none)'
              : `\`${String(def.default)}\``;
    rows.push(`| \`--${def.flag}\` | \`${def.env}\` | ${dflt} | ${def.description.replace(/\|/g, '\\|')} |`);
  }
  return rows.join('\n');
}
