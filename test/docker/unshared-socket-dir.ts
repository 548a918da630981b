/**
 * Run by agent-socket.test.ts inside a mount namespace of its own: a docker backend whose agent
 * socket directory (argv[2], a tmpfs only this process sees) the engine's host does not have.
 * Prints one JSON line of what the sessions got.
 */
import { randomUUID } from 'node:crypto';
import { createDockerBackend } from '../../src/backends/docker/index.ts';
import { silentLogger } from '../../src/logger.ts';
import { asSessionId, asTenantId } from '../../src/ids.ts';
import { docker, RecordingSink, sessionSpec, spawnRequest } from './helpers.ts';

const [root, image] = process.argv.slice(2);
const backend = createDockerBackend(
  {
    defaultImage: image ?? '',
    instanceId: `test-unshared-${randomUUID().slice(0, 8)}`,
    defaultResources: { memoryMb: 256, cpus: 1, pids: 128 },
    agentSocketDir: root,
  },
  silentLogger,
);
try {
  const spec = () => sessionSpec({ id: asSessionId(randomUUID()), tenant: asTenantId('alice') });
  const first = await backend.createSession(spec());
  const sink = new RecordingSink();
  await first.spawn(spawnRequest(['echo', 'through the engine']), sink);
  await sink.exited;
  // Binds only: the agent's own volume (agent-volume.ts) is there either way.
  const mounts = (
    JSON.parse(await docker('inspect', '--format', '{{json .Mounts}}', first.containerId ?? '')) as Array<{
      Type: string;
    }>
  ).filter((m) => m.Type === 'bind');
  const second = await backend.createSession(spec());
  await second.spawn(spawnRequest(['true']), new RecordingSink());
  console.log(
    JSON.stringify({
      execPath: first.execPath,
      transport: first.agentTransport,
      output: sink.text('stdout'),
      mounts,
      second: second.agentTransport,
    }),
  );
  await Promise.all([first.destroy(), second.destroy()]);
} finally {
  await backend.close();
}
