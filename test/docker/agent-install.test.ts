/**
 * The agent's install and presence check through the engine's archive API
 * (src/backends/docker/agent/agent-install.ts), against a real engine.
 */
import assert from 'node:assert/strict';
import { Agent } from 'node:http';
import { test } from 'node:test';
import Docker from 'dockerode';
import { agentBinary, agentPresent, installAgent } from '../../src/backends/docker/agent/agent-install.ts';
import { dockerTestOptions, TEST_IMAGE } from './engine.ts';
import { docker } from './helpers.ts';

test(
  'the presence check gives its engine connection back: one connection serves many checks',
  dockerTestOptions,
  async (t) => {
    // One connection at most: a check that left its answer unread would hold it, and the next
    // check would wait for it until its deadline and say "absent".
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    t.after(() => agent.destroy());
    const engine = new Docker({ agent } as Docker.DockerOptions);
    const id = (await docker('create', '--network', 'none', TEST_IMAGE, 'sleep', '60')).trim();
    t.after(() => docker('rm', '-f', id));
    const container = engine.getContainer(id);
    const binary = await agentBinary();
    assert.ok(binary, 'build/exec-agent is built');
    assert.equal(await agentPresent(container, 2_000), false, 'a fresh container has no agent');
    await installAgent(container, binary, 10_000);
    for (let i = 0; i < 3; i++) assert.equal(await agentPresent(container, 2_000), true, `check ${i + 1}`);
  },
);
