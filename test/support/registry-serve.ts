/**
 * The test registry as a process, for suites outside Node (the Python SDK's): serves the test
 * image plus a random layer as `exec-test/py:latest`, prints its host (`127.0.0.1:PORT`) and
 * stops when its stdin closes.
 *
 *   node --import tsx test/support/registry-serve.ts
 */
import { imageFrom, startRegistry } from './registry.ts';

// As test/docker/engine.ts names it (not imported: that module registers a test under CI).
const image = await imageFrom(process.env.EXEC_SERVER_TEST_IMAGE ?? 'exec-server-test:latest', 2_000_000);
const registry = await startRegistry({ 'exec-test/py': image }, 1_000_000);
process.stdout.write(`${registry.host}\n`);
process.stdin.resume();
process.stdin.on('end', () => {
  void registry.close().then(() => process.exit(0));
});
