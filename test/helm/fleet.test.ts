/**
 * The chart's fleet (docs/kubernetes.md, "A fleet"), rendered by the real helm (the first of
 * helm-binary.ts's releases) with ci/fleet-values.yaml and with the defaults: server replicas
 * behind a plain Service over a StatefulSet of Docker engines reached with TLS client
 * certificates, a PodDisruptionBudget, a rolling update that never has fewer replicas than asked
 * and drains each one (preStop, then SIGTERM within the grace), engines never rolled. Linting
 * and the API-schema validation of every object are in render.test.ts (it renders every
 * ci/*-values.yaml, this one included).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { before, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { IStatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import type { INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import type { IService } from 'kubernetes-models/v1/Service';
import { HELM_RELEASES, helmBinary, helmEnv } from './helm-binary.ts';

const run = promisify(execFile);
const IN_CI = process.env['CI'] === 'true' || process.env['CI'] === '1';
const root = fileURLToPath(new URL('../../', import.meta.url));
const chart = join(root, 'helm', 'exec-server');

type Obj = { kind: string; metadata: { name: string; labels?: Record<string, string> } };
let bin: string | undefined;
let unavailable: string | undefined;

before(async () => {
  try {
    bin = await helmBinary(HELM_RELEASES[0]!);
  } catch (err) {
    unavailable = `helm cannot be had: ${(err as Error).message}`;
    if (IN_CI) throw new Error(unavailable);
  }
});

async function render(args: string[]): Promise<Obj[]> {
  const { stdout } = await run(bin!, ['template', 'fx', chart, '--namespace', 'ns', ...args], {
    env: helmEnv,
    timeout: 60_000,
  });
  return parseAllDocuments(stdout)
    .map((d) => d.toJS() as Obj | null)
    .filter((o): o is Obj => o !== null);
}

const find = <T>(objects: Obj[], kind: string, name: string): T => {
  const o = objects.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o, `${kind} ${name}`);
  return o as unknown as T;
};

const matches = (selector: Record<string, string>, labels: Record<string, string> | undefined): boolean =>
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);

for (const [name, args] of [
  ['ci/fleet-values.yaml', ['-f', join(chart, 'ci', 'fleet-values.yaml')]],
  ['the default values', []],
] as const) {
  test(`a fleet, ${name}: replicas behind a plain Service over TLS engines, rolled without losing sessions`, async (t) => {
    if (unavailable !== undefined) return t.skip(unavailable);
    const objects = await render([...args]);
    const dep = find<IDeployment>(objects, 'Deployment', 'fx-exec-server');
    const pod = dep.spec!.template.spec!;
    const server = pod.containers.find((c) => c.name === 'exec-server')!;
    const vars = new Map(server.env?.map((e) => [e.name, e.value ?? e.valueFrom?.fieldRef?.fieldPath]));
    const engines = find<IStatefulSet>(objects, 'StatefulSet', 'fx-exec-server-engine');
    const count = engines.spec!.replicas!;

    assert.equal(dep.spec?.replicas, 3, 'three replicas');
    const svc = find<IService>(objects, 'Service', 'fx-exec-server');
    assert.equal(svc.spec?.sessionAffinity, 'None', 'no client-IP affinity: any replica serves any session');
    assert.deepEqual(dep.spec?.strategy, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
    const pdb = find<IPodDisruptionBudget>(objects, 'PodDisruptionBudget', 'fx-exec-server');
    assert.equal(pdb.spec?.maxUnavailable, 1);
    assert.deepEqual(pdb.spec?.selector?.matchLabels, dep.spec?.selector.matchLabels);

    // The fleet: one instance id, each pod its own replica, reached by its pod IP.
    assert.equal(vars.get('EXEC_SERVER_FLEET'), 'true');
    assert.equal(vars.get('EXEC_SERVER_REPLICA_ID'), 'metadata.name');
    assert.equal(vars.get('EXEC_SERVER_ADVERTISE_URL'), 'http://$(POD_IP):8765');
    assert.equal(vars.get('EXEC_SERVER_INSTANCE_ID'), 'fx-exec-server');
    const hosts = String(vars.get('EXEC_SERVER_DOCKER_HOST')).split(',');
    assert.deepEqual(
      hosts,
      Array.from({ length: count }, (_, i) => `tcp://fx-exec-server-engine-${i}.fx-exec-server-engine.ns.svc:2376`),
    );

    // A drain: the Service lets go of the pod (preStop), then SIGTERM within the grace.
    const preStop = server.lifecycle?.preStop?.exec?.command;
    assert.deepEqual(preStop?.slice(0, 1), ['sleep']);
    assert.ok(pod.terminationGracePeriodSeconds! > Number(preStop?.[1]) + 10, 'the grace covers preStop and the drain');

    // TLS both ways: the server's client certificate, the engines' --tlsverify, one Secret.
    assert.equal(vars.get('DOCKER_CERT_PATH'), '/etc/exec-server/docker-tls');
    assert.equal(vars.get('DOCKER_TLS_VERIFY'), '1');
    const secretOf = (volumes: typeof pod.volumes, mount: string) =>
      volumes?.find((v) => v.name === mount)?.secret?.secretName;
    const tlsSecret = secretOf(pod.volumes, 'docker-tls');
    assert.ok(tlsSecret);
    const enginePod = engines.spec!.template.spec!;
    assert.equal(secretOf(enginePod.volumes, 'tls'), tlsSecret, 'one Secret for both ends');
    const dockerd = enginePod.containers[0]!;
    assert.ok(dockerd.args?.includes('--tlsverify'));
    assert.ok(!dockerd.args?.some((a) => a.includes(':2375')), 'no plaintext listener');
    assert.equal(engines.spec?.updateStrategy?.type, 'OnDelete', 'an upgrade never restarts an engine');
    assert.equal(find<IService>(objects, 'Service', 'fx-exec-server-engine').spec?.clusterIP, 'None');

    // The server's selectors never take an engine pod (nor the reverse).
    const engineLabels = engines.spec!.template.metadata!.labels;
    assert.ok(!matches(dep.spec!.selector.matchLabels!, engineLabels), 'the Deployment does not select engines');
    assert.ok(!matches(svc.spec!.selector!, engineLabels), 'the Service does not send clients to engines');
    assert.ok(!matches(engines.spec!.selector.matchLabels!, dep.spec!.template.metadata!.labels));
    assert.ok(!pod.containers.some((c) => c.securityContext?.privileged), 'the server pods are unprivileged');

    const np = objects.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'fx-exec-server') as
      | INetworkPolicy
      | undefined;
    if (np !== undefined) {
      const toEngines = np.spec?.egress?.find((r) => matches(r.to?.[0]?.podSelector?.matchLabels ?? {}, engineLabels));
      assert.deepEqual(toEngines?.ports, [{ port: 2376, protocol: 'TCP' }], 'egress to the engines, TLS port only');
      // And the engines take connections from the server pods alone.
      const engineNp = find<INetworkPolicy>(objects, 'NetworkPolicy', 'fx-exec-server-engine').spec;
      assert.deepEqual(engineNp?.podSelector?.matchLabels, engines.spec!.selector.matchLabels);
      assert.deepEqual(engineNp?.ingress?.[0]?.from, [
        { podSelector: { matchLabels: dep.spec!.selector.matchLabels } },
      ]);
      assert.deepEqual(engineNp?.ingress?.[0]?.ports, [{ port: 'docker-tls', protocol: 'TCP' }]);
    }
  });
}
