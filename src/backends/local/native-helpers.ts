/**
 * Where the local backend's native helpers live: `scripts/build-native.sh` (run by `npm install`)
 * compiles `native/<name>.c` into `build/<name>`.
 */
import { fileURLToPath } from 'node:url';

export type NativeHelper = 'pty-relay' | 'sandbox-join';

export function nativeHelperPath(name: NativeHelper): string {
  return fileURLToPath(new URL(`../../../build/${name}`, import.meta.url));
}
