/**
 * Static checks of the Helm chart's templates (helm/exec-server/templates): every EXEC_SERVER_*
 * variable they set exists in the option table and parses by the server's grammars, the
 * security settings of each container, the instance id, the conditional resources, the
 * NetworkPolicy, and the templates' own form. Chart.yaml and the values schema are in
 * chart.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import { loadConfig, OPTIONS, parseDockerHost, parseListen } from '../../src/config.ts';
import { type Json, template, templates, values } from './chart-files.ts';

/**
 * A template reduced to plain YAML: lines that are only actions (if/else/end/with/range,
 * include or toYaml with nindent) are dropped, other actions become the scalar TEMPLATE.
 * Both branches of an if stay, so duplicate keys are allowed. Enough to check literal settings.
 */
function skeleton(text: string): unknown {
  const lines = text
    .replace(/\{\{-?\s*\/\*[\s\S]*?\*\/\s*-?\}\}/g, '')
    .split('\n')
    .filter((line) => !/^\s*(\{\{-?[\s\S]*?-?\}\}\s*)+$/.test(line))
    .map((line) => line.replace(/\{\{-?[\s\S]*?-?\}\}/g, 'TEMPLATE'));
  return parse(lines.join('\n'), { uniqueKeys: false });
}

/** The body of `{{- define "name" -}} ... {{- end }}` in a template file (nesting aware). */
function defineBody(text: string, name: string): string {
  const start = text.indexOf(`{{- define "${name}" -}}`);
  assert.ok(start >= 0, `define ${name} exists`);
  const actions = /\{\{-?\s*(if|with|range|define|end)\b[^}]*\}\}/g;
  actions.lastIndex = start;
  let depth = 0;
  let bodyStart = -1;
  for (let m = actions.exec(text); m; m = actions.exec(text)) {
    if (m[1] === 'end') depth -= 1;
    else depth += 1;
    if (bodyStart < 0) bodyStart = m.index + m[0].length;
    if (depth === 0) return text.slice(bodyStart, m.index);
  }
  throw new Error(`define ${name} is not closed`);
}

interface Container {
  name?: string;
  args?: unknown[];
  env?: Array<{ name: string; value?: unknown }>;
  securityContext?: Record<string, unknown>;
  volumeMounts?: Array<{ name: string; mountPath: string }>;
}

function serverContainer(): Container {
  const doc = skeleton(template('deployment.yaml')) as { spec: { template: { spec: { containers: Container[] } } } };
  const server = doc.spec.template.spec.containers.find((c) => c.name === 'exec-server');
  assert.ok(server, 'the deployment has an exec-server container');
  return server;
}

function dindContainer(): Container {
  const list = skeleton(defineBody(template('_helpers.tpl'), 'exec-server.dindContainer')) as Container[];
  assert.equal(list.length, 1);
  const dind = list[0];
  assert.ok(dind && dind.name === 'dind');
  return dind;
}

test('every EXEC_SERVER_* variable the chart sets exists in the option table', () => {
  const known = new Set<string>(Object.values(OPTIONS).map((o) => o.env));
  const set = new Set<string>();
  for (const text of templates.values()) for (const m of text.matchAll(/\bEXEC_SERVER_[A-Z0-9_]+/g)) set.add(m[0]);
  assert.ok(set.size >= 20, `found ${set.size} variables`);
  assert.deepEqual(
    [...set].filter((v) => !known.has(v)),
    [],
  );
  const env = new Map((serverContainer().env ?? []).map((e) => [e.name, e.value]));
  assert.equal(env.get('EXEC_SERVER_TOKENS_FILE'), '/etc/exec-server/tokens/tokens');
  assert.ok(env.has('EXEC_SERVER_INSTANCE_ID') && env.has('EXEC_SERVER_SHUTDOWN_GRACE_MS'));
  assert.ok(!env.has('EXEC_SERVER_TOKEN') && !env.has('EXEC_SERVER_TOKENS'), 'tokens only through the mounted file');
});

test('the instance id is stable per release (fullname), never the pod name', () => {
  const helpers = template('_helpers.tpl');
  assert.match(defineBody(helpers, 'exec-server.instanceId'), /include "exec-server\.fullname"/);
  const deployment = template('deployment.yaml');
  assert.match(
    deployment,
    /name: EXEC_SERVER_INSTANCE_ID\n\s+value: \{\{ include "exec-server\.instanceId" \. \| quote \}\}/,
  );
  // The pod name (downward API) may name a pod's own files (its audit log), never the instance.
  assert.doesNotMatch(deployment, /EXEC_SERVER_INSTANCE_ID\n\s+valueFrom/, 'no downward-API pod name');
});

test('the server container runs non-root, read-only, with every capability dropped', () => {
  const server = serverContainer();
  assert.deepEqual(server.args?.slice(0, 2), ['serve', '--listen']);
  assert.match(String(server.args?.[2]), /^ws:\/\/0\.0\.0\.0:/);
  assert.deepEqual(server.args?.slice(3, 5), ['--backend', 'docker']);
  const sc = server.securityContext ?? {};
  assert.equal(sc['runAsNonRoot'], true);
  assert.equal(sc['privileged'], false);
  assert.equal(sc['allowPrivilegeEscalation'], false);
  assert.equal(sc['readOnlyRootFilesystem'], true);
  assert.deepEqual(sc['capabilities'], { drop: ['ALL'] });
  assert.ok(
    server.volumeMounts?.some((m) => m.name === 'tmp' && m.mountPath === '/tmp'),
    '/tmp is an emptyDir',
  );
  const deployment = template('deployment.yaml');
  assert.match(deployment, /- name: tmp\n\s+emptyDir:/);
  assert.match(deployment, /path: \/healthz|livenessProbe/);
  assert.equal((values['livenessProbe'] as { httpGet: { path: string } }).httpGet.path, '/healthz');
  assert.equal((values['readinessProbe'] as { httpGet: { path: string } }).httpGet.path, '/readyz');
});

test('dind is the only privileged container and listens only on the shared unix socket', () => {
  const helpers = template('_helpers.tpl');
  const dindBody = defineBody(helpers, 'exec-server.dindContainer');
  for (const [file, text] of templates) {
    // The fleet's engines (engines.yaml) are dind too: their own pods, TLS only (below).
    if (file === 'engines.yaml') continue;
    const outside = file === '_helpers.tpl' ? text.replace(dindBody, '') : text;
    assert.doesNotMatch(outside, /privileged:\s*true/, `${file}: privileged outside the dind container`);
    assert.doesNotMatch(
      text,
      /hostPath|hostNetwork|hostPID|hostIPC|\/var\/run\/docker\.sock/,
      `${file}: no host socket or host namespaces`,
    );
  }
  const dind = dindContainer();
  assert.equal(dind.securityContext?.['privileged'], true);
  // First arg `dockerd`: the docker:dind entrypoint adds nothing (given only flags it would add
  // a plaintext tcp://0.0.0.0:2375 listener).
  assert.equal(dind.args?.[0], 'dockerd');
  assert.ok(dind.args?.some((a) => String(a).startsWith('--host=unix://')));
  assert.ok(!dind.args?.some((a) => /tcp:\/\//.test(String(a))));
  const env = new Map((dind.env ?? []).map((e) => [e.name, e.value]));
  assert.equal(env.get('DOCKER_TLS_CERTDIR'), '');
  assert.deepEqual(
    dind.volumeMounts?.map((m) => m.name),
    ['docker-socket', 'docker-storage', 'agent-sockets'],
  );
  assert.equal(dind.volumeMounts?.[1]?.mountPath, '/var/lib/docker');
  assert.ok(
    serverContainer().volumeMounts?.some((m) => m.name === 'docker-socket'),
    'the server shares the socket directory',
  );
  // The agent sockets' volume at one path in both, named to the server (docs/docker-backend.md).
  const agentMount = dind.volumeMounts?.find((m) => m.name === 'agent-sockets')?.mountPath;
  assert.equal(agentMount, '/run/exec-server-agents');
  assert.equal(serverContainer().volumeMounts?.find((m) => m.name === 'agent-sockets')?.mountPath, agentMount);
  // dind's (a fleet's engines are across the network: `off`, through the engine).
  assert.deepEqual(
    serverContainer()
      .env?.filter((e) => e.name === 'EXEC_SERVER_DOCKER_AGENT_SOCKET_DIR')
      .map((e) => e.value)
      .sort(),
    [agentMount, 'off'],
  );
  assert.match(defineBody(helpers, 'exec-server.dockerSocketDir').trim(), /^\/run\/docker$/);
  const deployment = template('deployment.yaml');
  assert.match(
    deployment,
    /- name: docker-storage\n\s+emptyDir:[\s\S]*?sizeLimit: \{\{ \.Values\.dind\.storage\.sizeLimit \}\}/,
  );
  assert.match(
    deployment,
    /initContainers:\n\s+\{\{- include "exec-server\.dindContainer" \. \| nindent 8 \}\}/,
    'native sidecar',
  );
  assert.match(dindBody, /\{\{- if \.Values\.docker\.nativeSidecar \}\}\n\s+restartPolicy: Always/);
});

test('conditional resources: ServiceMonitor needs the CRD, Secret only when the chart manages tokens', () => {
  assert.match(
    template('servicemonitor.yaml').split('\n')[0] ?? '',
    /^\{\{- if and \.Values\.serviceMonitor\.enabled \(\.Capabilities\.APIVersions\.Has "monitoring\.coreos\.com\/v1"\) \}\}$/,
  );
  assert.match(template('secret.yaml').split('\n')[0] ?? '', /^\{\{- if not \.Values\.auth\.existingSecret \}\}$/);
  const service = skeleton(template('service.yaml')) as { spec: { ports: Array<{ name: string }> } };
  assert.deepEqual(
    service.spec.ports.map((p) => p.name),
    ['http'],
  );
  assert.match(template('servicemonitor.yaml'), /- port: http\n\s+path: \/metrics/);
});

test('template actions are balanced and YAML files use 2-space indentation', () => {
  for (const [file, text] of templates) {
    const stripped = text.replace(/\{\{-?\s*\/\*[\s\S]*?\*\/\s*-?\}\}/g, '');
    const opens = [...stripped.matchAll(/\{\{-?\s*(if|with|range|define)\b/g)].length;
    const ends = [...stripped.matchAll(/\{\{-?\s*end\b/g)].length;
    assert.equal(opens, ends, `${file}: ${opens} blocks opened, ${ends} closed`);
    assert.doesNotMatch(text, /\t/, `${file}: no tabs`);
    if (file.endsWith('.yaml')) {
      for (const line of text.split('\n')) {
        const indent = /^( *)/.exec(line)?.[1]?.length ?? 0;
        assert.equal(indent % 2, 0, `${file}: odd indentation: ${line}`);
      }
      assert.doesNotMatch(text, /\{\{\s*template\s/, `${file}: include, not template`);
    }
  }
});

test('NetworkPolicy: off by default, the release pods, the server port only, egress to DNS first', () => {
  const text = template('networkpolicy.yaml');
  assert.match(text.split('\n')[0] ?? '', /^\{\{- if \.Values\.networkPolicy\.enabled \}\}$/);
  assert.equal((values['networkPolicy'] as { enabled: boolean }).enabled, false);
  assert.match(
    text,
    /podSelector:\n\s+matchLabels:\n\s+\{\{- include "exec-server\.selectorLabels" \. \| nindent 6 \}\}/,
  );
  assert.deepEqual(
    [...text.matchAll(/- port: (\S+)/g)].map((m) => m[1]),
    ['http', '53', '53', '{{', '{{'],
    'ports: the server port; DNS; the external engine port; the fleet engines port',
  );
  assert.match(text, /concat \.Values\.networkPolicy\.ingressFrom \.Values\.networkPolicy\.metricsFrom/);
  assert.match(text, /ingress: \[\]/, 'no peers named: no ingress');
  assert.match(text, /egress:\n\s+- to:\n\s+\{\{- toYaml \.Values\.networkPolicy\.egress\.dns/);
});

test('the values the chart passes on parse by the grammars of the server (CLI, environment)', () => {
  const deployment = template('deployment.yaml');
  const lookup = (path: string): Json | undefined =>
    path.split('.').reduce<Json | undefined>((o, k) => (o as Record<string, Json> | undefined)?.[k], values);
  // `- name: EXEC_SERVER_X` / `value: {{ .Values.a.b ... }}`: the default value, as the variable.
  const env: Record<string, string> = {};
  for (const m of deployment.matchAll(/- name: (EXEC_SERVER_[A-Z0-9_]+)\n\s+value: \{\{ \.Values\.([\w.]+)/g)) {
    const value = lookup(m[2] ?? '');
    if (value !== undefined && value !== null && value !== '') env[m[1] ?? ''] = String(value);
  }
  assert.ok(Object.keys(env).length >= 20, `found ${Object.keys(env).length} variables`);
  const port = lookup('server.port');
  const listen = `ws://0.0.0.0:${String(port)}`;
  assert.deepEqual(parseListen(listen), { host: '0.0.0.0', port });
  const config = loadConfig(['--listen', listen, '--token', 't'], env);
  for (const [name, def] of Object.entries(OPTIONS))
    if (env[def.env] !== undefined)
      assert.equal(String(config[name as keyof typeof config]), env[def.env], `${def.env} parses as given`);
  // The engine address the chart sets in dind mode, and the forms its external mode documents.
  const socketDir = defineBody(template('_helpers.tpl'), 'exec-server.dockerSocketDir').trim();
  for (const host of [`unix://${socketDir}/docker.sock`, 'tcp://docker:2375', 'https://docker:2376'])
    assert.ok(parseDockerHost(host, 'docker.host'), host);
});
