/** The package version, reported in `initialize` and `exec_server_build_info`. */
import { readFileSync } from 'node:fs';

/** The version in package.json, read once at startup. */
export const VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
