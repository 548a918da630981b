/**
 * The chart rendered by real helm binaries (Helm 3 and Helm 4, see helm-binary.ts): `helm lint
 * --strict` and `helm template` for the default values and every ci/*-values.yaml; every
 * rendered object is validated against the Kubernetes API schemas (kubernetes-models; the
 * ServiceMonitor against the Prometheus Operator's) and checked for the settings the chart
 * promises: the server non-root and read-only with no capabilities, dind the only privileged
 * container, the NetworkPolicy's peers and ports. What particular values render (audit log,
 * engine port, NOTES.txt) and helm's refusals of bad values are in render-values.test.ts.
 *
 * Under CI=true a helm binary that cannot be had fails; elsewhere these tests are skipped.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { Deployment, type IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { NetworkPolicy, type INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { Secret, type ISecret } from 'kubernetes-models/v1/Secret';
import { Service, type IService } from 'kubernetes-models/v1/Service';
import { ServiceAccount } from 'kubernetes-models/v1/ServiceAccount';
import {
  ServiceMonitor,
  type IServiceMonitor,
} from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import { HELM_RELEASES } from './helm-binary.ts';
import { chart, ciDir, helm, helmSuite, isObject, NAMESPACE, type Obj, one, RELEASE, render } from './helm-render.ts';

type Values = Record<string, unknown>;

/** Schema validators by apiVersion/kind: every kind the chart renders must be here. */
const MODELS: Record<string, (o: Obj) => void> = {
  'v1/ServiceAccount': (o) => new ServiceAccount(o as never).validate(),
  'v1/Secret': (o) => new Secret(o as never).validate(),
  'v1/Service': (o) => new Service(o as never).validate(),
  'apps/v1/Deployment': (o) => new Deployment(o as never).validate(),
  'apps/v1/StatefulSet': (o) => new StatefulSet(o as never).validate(),
  'policy/v1/PodDisruptionBudget': (o) => new PodDisruptionBudget(o as never).validate(),
  'networking.k8s.io/v1/NetworkPolicy': (o) => new NetworkPolicy(o as never).validate(),
  'monitoring.coreos.com/v1/ServiceMonitor': (o) => new ServiceMonitor(o as never).validate(),
};

const defaults = parse(readFileSync(join(chart, 'values.yaml'), 'utf8')) as Values;

/** Helm's merge of a values file over values.yaml (maps merge, everything else replaces). */
function merge(base: Values, over: Values): Values {
  const out: Values = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] = isObject(b) && isObject(v) ? merge(b, v) : v;
  }
  return out;
}

function get(values: Values, path: string): unknown {
  let node: unknown = values;
  for (const key of path.split('.')) node = isObject(node) ? node[key] : undefined;
  return node;
}

interface Case {
  name: string;
  args: string[];
  values: Values;
}
const cases: Case[] = [
  { name: 'default values', args: [], values: defaults },
  ...readdirSync(ciDir)
    .filter((f) => f.endsWith('-values.yaml'))
    .sort()
    .map((f) => ({
      name: `ci/${f}`,
      args: ['-f', join(ciDir, f)],
      values: merge(defaults, parse(readFileSync(join(ciDir, f), 'utf8')) as Values),
    })),
];

type Container = NonNullable<NonNullable<NonNullable<IDeployment['spec']>['template']['spec']>['containers'][number]>;

/** The settings every rendering must have, whatever the values. */
function checkSecurity(objects: Obj[], values: Values): void {
  const dep = one<IDeployment>(objects, 'Deployment');
  const pod = dep.spec?.template.spec;
  assert.ok(pod);
  const all: Container[] = [...pod.containers, ...(pod.initContainers ?? [])];
  const server = pod.containers.find((c) => c.name === 'exec-server');
  assert.ok(server, 'the exec-server container');
  const sc = server.securityContext ?? {};
  assert.equal(sc.runAsNonRoot, true);
  assert.equal(sc.runAsUser, get(values, 'securityContext.runAsUser'));
  assert.equal(sc.readOnlyRootFilesystem, true);
  assert.equal(sc.allowPrivilegeEscalation, false);
  assert.equal(sc.privileged, false);
  assert.deepEqual(sc.capabilities, { drop: ['ALL'] });
  assert.ok(server.resources?.limits?.['memory'], 'a memory limit');
  assert.deepEqual(server.args?.slice(0, 5), [
    'serve',
    '--listen',
    `ws://0.0.0.0:${String(get(values, 'server.port'))}`,
    '--backend',
    'docker',
  ]);
  assert.deepEqual(
    server.ports?.map((p) => [p.name, p.containerPort]),
    [['http', get(values, 'server.port')]],
  );

  assert.equal(pod.automountServiceAccountToken, false);
  assert.equal(pod.securityContext?.seccompProfile?.type, 'RuntimeDefault');
  assert.ok(!pod.hostNetwork && !pod.hostPID && !pod.hostIPC, 'no host namespaces');
  assert.ok(!(pod.volumes ?? []).some((v) => v.hostPath), 'no hostPath volume');
  const grace = Math.ceil(Number(get(values, 'server.shutdownGraceMs')) / 1000);
  assert.ok((pod.terminationGracePeriodSeconds ?? 30) > grace, 'the pod outlives the shutdown grace');

  const privileged = all.filter((c) => c.securityContext?.privileged === true).map((c) => c.name);
  const dind = get(values, 'docker.mode') === 'dind';
  assert.deepEqual(privileged, dind ? ['dind'] : [], 'dind is the only privileged container');
  if (dind) {
    const engine = all.find((c) => c.name === 'dind');
    assert.ok(engine);
    assert.equal(engine.args?.[0], 'dockerd');
    assert.ok(!engine.args?.some((a) => a.includes('tcp://')), 'no TCP listener');
    const native = get(values, 'docker.nativeSidecar') === true;
    assert.equal(
      pod.initContainers?.some((c) => c.name === 'dind' && c.restartPolicy === 'Always') ?? false,
      native,
      'native sidecar as configured',
    );
    assert.ok(pod.securityContext?.supplementalGroups?.includes(Number(get(values, 'docker.socketGid'))));
  } else {
    // A fleet (docs/kubernetes.md): the engines across the network, the first for the CLI's variable.
    const env = new Map(server.env?.map((e) => [e.name, e.value]));
    const first =
      get(values, 'docker.mode') === 'external' ? String(get(values, 'docker.host')).split(',')[0] : undefined;
    assert.equal(env.get('DOCKER_HOST'), first ?? `tcp://${RELEASE}-engine-0.${RELEASE}-engine.${NAMESPACE}.svc:2376`);
    assert.equal(env.get('EXEC_SERVER_FLEET'), 'true');
  }
  assert.deepEqual(dep.spec?.strategy, get(values, 'updateStrategy'));
  assert.equal(dep.spec?.replicas, get(values, 'replicaCount'));

  const svc = objects.find((o) => o.kind === 'Service' && o.metadata.name === dep.metadata?.name) as IService;
  assert.deepEqual(
    svc.spec?.ports?.map((p) => [p.name, p.targetPort]),
    [['http', 'http']],
  );
  assert.equal(svc.spec?.sessionAffinity, get(values, 'service.sessionAffinity'));
  assert.deepEqual(svc.spec?.selector, dep.spec?.selector.matchLabels);
}

function checkNetworkPolicy(objects: Obj[], values: Values): void {
  // The server pods' policy (the engines' own is checked in fleet.test.ts).
  const policies = objects.filter(
    (o) => o.kind === 'NetworkPolicy' && !o.metadata.name.endsWith('-engine'),
  ) as unknown as INetworkPolicy[];
  if (get(values, 'networkPolicy.enabled') !== true) {
    assert.equal(policies.length, 0, 'no NetworkPolicy unless enabled');
    return;
  }
  assert.equal(policies.length, 1);
  const np = policies[0]?.spec;
  const dep = one<IDeployment>(objects, 'Deployment');
  assert.ok(np);
  assert.deepEqual(np.podSelector?.matchLabels, dep.spec?.selector.matchLabels, 'selects exactly the release pods');
  const restrict = get(values, 'networkPolicy.egress.restrict') === true;
  assert.deepEqual(np.policyTypes, restrict ? ['Ingress', 'Egress'] : ['Ingress']);

  const peers = [
    ...(get(values, 'networkPolicy.ingressFrom') as unknown[]),
    ...(get(values, 'networkPolicy.metricsFrom') as unknown[]),
  ];
  assert.equal(np.ingress?.length, peers.length > 0 ? 1 : 0, 'one ingress rule, or none (deny)');
  if (peers.length > 0) {
    assert.deepEqual(np.ingress?.[0]?.from, peers, 'exactly the named peers');
    assert.deepEqual(np.ingress?.[0]?.ports, [{ port: 'http', protocol: 'TCP' }], 'only the server port');
  }
  if (!restrict) {
    assert.equal(np.egress, undefined);
    return;
  }
  const egress = np.egress ?? [];
  assert.deepEqual(egress[0], {
    to: get(values, 'networkPolicy.egress.dns'),
    ports: [
      { port: 53, protocol: 'UDP' },
      { port: 53, protocol: 'TCP' },
    ],
  });
  const extra = get(values, 'networkPolicy.egress.extra') as unknown[];
  if (get(values, 'docker.mode') === 'external') {
    const port =
      (get(values, 'networkPolicy.egress.enginePort') as number | null) ??
      Number(/:(\d+)\/?$/.exec(String(get(values, 'docker.host')))?.[1]);
    assert.deepEqual(egress[1], { to: get(values, 'networkPolicy.egress.engine'), ports: [{ port, protocol: 'TCP' }] });
    assert.deepEqual(egress.slice(2), extra);
  } else {
    const engines = get(values, 'docker.mode') === 'engines' ? 1 : 0;
    assert.equal(egress.slice(1, 1 + engines)[0]?.ports?.[0]?.port, engines ? get(values, 'engines.port') : undefined);
    assert.deepEqual(egress.slice(1 + engines), extra, 'DNS, the fleet engines, and the configured rules only');
  }
  for (const rule of egress) assert.ok((rule.to ?? []).length > 0, 'no egress rule open to every destination');
}

function checkServiceMonitor(objects: Obj[], values: Values): void {
  const monitors = objects.filter((o) => o.kind === 'ServiceMonitor') as unknown as IServiceMonitor[];
  if (get(values, 'serviceMonitor.enabled') !== true) {
    assert.equal(monitors.length, 0);
    return;
  }
  assert.equal(monitors.length, 1);
  const endpoint = monitors[0]?.spec.endpoints?.[0];
  assert.equal(endpoint?.port, 'http');
  assert.equal(endpoint?.path, '/metrics');
  const credentials = endpoint?.authorization?.credentials;
  assert.ok(credentials, 'the scrape presents a bearer token');
  const secret = objects.find((o) => o.kind === 'Secret' && o.metadata.name === credentials.name) as
    | ISecret
    | undefined;
  assert.ok(secret?.data?.[credentials.key], 'the token is in the chart Secret');
  const tokens = Buffer.from(secret.data[String(get(values, 'auth.tokensKey'))] ?? '', 'base64').toString('utf8');
  const token = Buffer.from(secret.data[credentials.key] ?? '', 'base64').toString('utf8');
  assert.ok(tokens.split('\n').includes(`metrics:${token}`), 'the metrics tenant is in the tokens file');
}

for (const release of HELM_RELEASES) {
  describe(`helm ${release.version}`, () => {
    const suite = helmSuite(release);

    test('helm lint --strict: the default values and every ci/*-values.yaml', { timeout: 600_000 }, async (t) => {
      if (!suite.ready(t)) return;
      assert.ok(cases.length >= 6, `${cases.length} cases`);
      for (const c of cases) {
        const r = await helm(suite.bin, ['lint', '--strict', chart, ...c.args]);
        assert.equal(r.code, 0, `${c.name}:\n${r.out}`);
        assert.match(r.out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
      }
    });

    for (const c of cases) {
      test(`helm template, ${c.name}: objects valid against the API schemas, security settings`, {
        timeout: 120_000,
      }, async (t) => {
        if (!suite.ready(t)) return;
        const objects = await render(suite.bin, c.args);
        assert.ok(objects.length >= 4, `${objects.length} objects`);
        for (const o of objects) {
          const validate = MODELS[`${o.apiVersion}/${o.kind}`];
          assert.ok(validate, `a schema for ${o.apiVersion} ${o.kind}`);
          try {
            validate(o);
          } catch (err) {
            assert.fail(`${o.kind} ${o.metadata.name} is not valid: ${(err as Error).message}`);
          }
          assert.equal((o.metadata as { namespace?: string }).namespace, undefined, 'the release namespace applies');
        }
        checkSecurity(objects, c.values);
        checkNetworkPolicy(objects, c.values);
        checkServiceMonitor(objects, c.values);
      });
    }

    test('without the monitoring.coreos.com/v1 API no ServiceMonitor is rendered', { timeout: 120_000 }, async (t) => {
      if (!suite.ready(t)) return;
      const objects = await render(suite.bin, ['-f', join(ciDir, 'servicemonitor-values.yaml')], []);
      assert.equal(objects.filter((o) => o.kind === 'ServiceMonitor').length, 0);
    });
  });
}
