/**
 * Builds a child's environment the way Codex's `create_env` does when the client sends an
 * `envPolicy`: start from an inherited set, drop the default secret-looking names unless told
 * not to, drop `exclude` patterns, apply `set`, keep only `includeOnly` when given; then the
 * start's `env` is laid over it. Without an `envPolicy` the start's `env` is used as it is.
 */

export interface EnvPolicy {
  readonly inherit?: 'all' | 'core' | 'none' | undefined;
  readonly ignoreDefaultExcludes?: boolean | undefined;
  readonly exclude?: readonly string[] | undefined;
  readonly set?: Readonly<Record<string, string>> | undefined;
  readonly includeOnly?: readonly string[] | undefined;
}

const CORE_VARS = new Set(['HOME', 'LOGNAME', 'PATH', 'SHELL', 'USER', 'USERNAME', 'TMPDIR', 'TEMP', 'TMP']);
const DEFAULT_EXCLUDES = ['*KEY*', '*SECRET*', '*TOKEN*'];

function globToRegExp(glob: string): RegExp {
  const body = glob
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${body}$`, 'i');
}

function matchesAny(name: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => globToRegExp(p).test(name));
}

/** A command's environment from the server's base, the start's `envPolicy` and its `env`, as Codex builds it. */
export function buildEnvironment(
  base: Readonly<Record<string, string>>,
  policy: EnvPolicy | undefined,
  overlay: Readonly<Record<string, string>> | undefined,
): Record<string, string> {
  let env: Record<string, string>;
  if (policy === undefined) {
    // Codex uses `env` exactly; we only add PATH so `bash` and friends resolve.
    env = { ...(base['PATH'] !== undefined ? { PATH: base['PATH'] } : {}) };
  } else {
    const inherit = policy.inherit ?? 'all';
    env = {};
    if (inherit !== 'none') {
      for (const [k, v] of Object.entries(base)) if (inherit === 'all' || CORE_VARS.has(k)) env[k] = v;
    }
    if (!policy.ignoreDefaultExcludes)
      for (const k of Object.keys(env)) if (matchesAny(k, DEFAULT_EXCLUDES)) delete env[k];
    if (policy.exclude?.length) for (const k of Object.keys(env)) if (matchesAny(k, policy.exclude)) delete env[k];
    // Spread, not Object.assign: assigning `__proto__` would set the prototype and lose the variable.
    env = { ...env, ...policy.set };
    if (policy.includeOnly?.length)
      for (const k of Object.keys(env)) if (!matchesAny(k, policy.includeOnly)) delete env[k];
  }
  return { ...env, ...overlay };
}

/**
 * A command always gets a HOME: the one the client or its `envPolicy` named, else `home` (the
 * session's). Without it `bash -l` reads profiles relative to `/` and git, npm or pip misbehave.
 */
export function withHome(env: Readonly<Record<string, string>>, home: string): Readonly<Record<string, string>> {
  return env['HOME'] ? env : { ...env, HOME: home };
}
