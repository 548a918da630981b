/** The one grammar of OCI runtime names and of the options that list them. */
import { ConfigError } from './config-error.ts';
import { commaList, poolSizes } from './lists.ts';

/** A runtime name as the engine registers it (`runc`, `runsc`, `kata-1.0`). */
const RUNTIME_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** True for a well-formed runtime name. */
export function isRuntimeName(name: string): boolean {
  return RUNTIME_NAME.test(name);
}

/** `--runtime`: one runtime name. */
export function checkRuntimeName(value: string, where = '--runtime'): string {
  if (!isRuntimeName(value)) throw new ConfigError(`${where}: ${JSON.stringify(value)} is not a runtime name`);
  return value;
}

/** `--allowed-runtimes` as a list (`runc,runsc`). */
export function runtimeList(value: string): string[] {
  return commaList(value).map((n) => checkRuntimeName(n, '--allowed-runtimes'));
}

/** `--warm-pool-runtimes` as sizes by runtime (`runsc=2,runc=1`). */
export function warmPoolRuntimes(value: string): Record<string, number> {
  return poolSizes(value, '--warm-pool-runtimes', 'RUNTIME', isRuntimeName);
}
