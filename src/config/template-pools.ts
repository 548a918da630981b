/** The grammar of `--warm-pool-templates`: pools restored from live templates (docs/snapshots.md). */
import { poolSizes } from './lists.ts';

/** A snapshot name or id (`sha256:...`) as a pool may name its template. */
const TEMPLATE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

/** `--warm-pool-templates` as sizes by live template, named or by id (`warm-repl=2`). */
export function warmPoolTemplates(value: string): Record<string, number> {
  return poolSizes(value, '--warm-pool-templates', 'NAME', (name) => TEMPLATE_NAME.test(name));
}
