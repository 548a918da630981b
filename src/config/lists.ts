/** The one list grammar of options and variables: comma-separated entries, blanks around each trimmed. */
import { ConfigError } from './config-error.ts';

/** `a, b,,c` -> `['a', 'b', '', 'c']`: every entry, trimmed, blanks kept (for callers that refuse them). */
export function commaEntries(value: string): string[] {
  return value.split(',').map((e) => e.trim());
}

/** `a, b,,c` -> `['a', 'b', 'c']`: the entries, trimmed, blanks dropped. */
export function commaList(value: string | undefined): string[] {
  return value === undefined ? [] : commaEntries(value).filter((e) => e !== '');
}

/**
 * `a=2,b=1` -> `{ a: 2, b: 1 }`: warm pool sizes by name (`--warm-pool-runtimes`,
 * `--warm-pool-templates`), each at most 256. `isName` says which names `option` takes; `what`
 * is what its message calls them (`RUNTIME`, `NAME`).
 */
export function poolSizes(
  value: string,
  option: string,
  what: string,
  isName: (name: string) => boolean,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of commaList(value)) {
    const eq = part.indexOf('=');
    const name = part.slice(0, eq);
    const size = part.slice(eq + 1);
    if (eq < 0 || !isName(name) || !/^\d{1,3}$/.test(size) || Number(size) > 256)
      throw new ConfigError(`${option}: expected ${what}=N (N at most 256), got ${JSON.stringify(part)}`);
    out[name] = Number(size);
  }
  return out;
}
