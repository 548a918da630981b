/** The grammar of `--warm-pool-templates`: pools restored from live templates (docs/snapshots.md). */
import { ConfigError } from './config-error.ts';
import { commaList } from './lists.ts';

/** A snapshot name or id (`sha256:...`) as a pool may name its template. */
const TEMPLATE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

/** `--warm-pool-templates` as sizes by live template, named or by id (`warm-repl=2`). */
export function warmPoolTemplates(value: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of commaList(value)) {
    const eq = part.indexOf('=');
    const name = part.slice(0, eq);
    const size = part.slice(eq + 1);
    if (eq < 0 || !TEMPLATE_NAME.test(name) || !/^\d{1,3}$/.test(size) || Number(size) > 256)
      throw new ConfigError(`--warm-pool-templates: expected NAME=N (N at most 256), got ${JSON.stringify(part)}`);
    out[name] = Number(size);
  }
  return out;
}
