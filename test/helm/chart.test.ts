/**
 * Static checks of the Helm chart (helm/exec-server): Chart.yaml is parsed, values.yaml is
 * validated against values.schema.json with ajv (and the schema against typos and unsafe
 * settings), and the values the templates reference exist. What the templates set (EXEC_SERVER_*
 * variables, the security settings of each container) is in chart-templates.test.ts; the
 * Dockerfile's checks are in test/image/.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { parse } from 'yaml';
import { chartDir, isObject, type Json, read, root, templates, values } from './chart-files.ts';

// ajv comes with fastify (not a direct dependency): load it the CommonJS way, typed minimally.
interface AjvError {
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
}
interface ValidateFn {
  (data: unknown): boolean;
  errors?: AjvError[] | null;
}
interface AjvInstance {
  compile(schema: object): ValidateFn;
}
type AjvCtor = new (options: Record<string, unknown>) => AjvInstance;
const require = createRequire(import.meta.url);
const ajvModule = require('ajv') as AjvCtor & { default?: AjvCtor };
const Ajv: AjvCtor = ajvModule.default ?? ajvModule;

const schema = JSON.parse(read(join(chartDir, 'values.schema.json'))) as Record<string, Json>;
const validate = new Ajv({ allErrors: true, allowUnionTypes: true, strict: true }).compile(schema);

function errorsOf(data: unknown): string[] {
  if (validate(data)) return [];
  return (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

/** values.yaml with `patch` applied at a dotted path. */
function withValue(path: string, value: Json): Record<string, Json> {
  const copy = structuredClone(values);
  const keys = path.split('.');
  let node: Record<string, Json> = copy;
  for (const key of keys.slice(0, -1)) {
    const next = node[key];
    if (!isObject(next)) throw new Error(`no object at ${key} of ${path}`);
    node = next as Record<string, Json>;
  }
  node[keys[keys.length - 1] ?? ''] = value;
  return copy;
}

/** True when the dotted path exists as keys in values.yaml (a null value counts). */
function hasPath(obj: unknown, path: readonly string[]): boolean {
  let node: unknown = obj;
  for (const key of path) {
    if (!isObject(node) || !Object.hasOwn(node, key)) return false;
    node = node[key];
  }
  return true;
}

/** Dotted paths of the leaves of values.yaml (arrays and empty maps are leaves). */
function leafPaths(obj: unknown, prefix: string[] = []): string[][] {
  if (!isObject(obj) || Object.keys(obj).length === 0) return [prefix];
  return Object.entries(obj).flatMap(([k, v]) => leafPaths(v, [...prefix, k]));
}

/** Every `.Values.a.b` path referenced by the templates. */
function referencedValuePaths(): Map<string, string> {
  const refs = new Map<string, string>();
  for (const [file, text] of templates) {
    for (const m of text.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) refs.set((m[1] ?? '').slice(1), file);
  }
  return refs;
}

test('Chart.yaml: apiVersion v2, name, SemVer version, appVersion', () => {
  const chart = parse(read(join(chartDir, 'Chart.yaml'))) as Record<string, unknown>;
  assert.equal(chart['apiVersion'], 'v2');
  assert.equal(chart['name'], 'exec-server');
  assert.equal(chart['type'], 'application');
  assert.match(String(chart['version']), /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/);
  assert.equal(typeof chart['appVersion'], 'string');
  const pkg = JSON.parse(read(join(root, 'package.json'))) as { version: string };
  assert.equal(chart['appVersion'], pkg.version, 'appVersion follows package.json');
});

test('values.yaml is valid against values.schema.json', () => {
  assert.deepEqual(errorsOf(values), []);
});

test('the schema rejects typos at every level, bad enums and unsafe settings', () => {
  const rejected: Array<[string, Record<string, Json>]> = [
    ['top-level typo', { ...values, iamge: { tag: 'latest' } }],
    ['nested typo', withValue('image.tga', 'latest')],
    ['server typo', withValue('server.maxSesions', 10)],
    ['deep typo', withValue('dind.storage.sizelimit', '1Gi')],
    ['probe typo', withValue('readinessProbe.httpGet.pth', '/readyz')],
    ['bad enum docker.mode', withValue('docker.mode', 'host')],
    ['bad enum sandbox', withValue('server.sandbox', 'none')],
    ['string for an integer', withValue('server.maxSessions', '256')],
    ['out of range (config.ts max)', withValue('server.maxProcesses', 5000)],
    ['fractional cpus (config.ts takes integers)', withValue('session.limits.cpus', 1.5)],
    ['root server uid', withValue('securityContext.runAsUser', 0)],
    ['capabilities are not configurable', withValue('securityContext.capabilities', { add: ['SYS_ADMIN'] } as Json)],
    ['dind TCP listener via extraArgs', withValue('dind.extraArgs', ['--host=tcp://0.0.0.0:2375'])],
    ['external mode without a host', withValue('docker.mode', 'external')],
    ['bad tenant name', withValue('auth.tokens', { 'alice smith': 'x'.repeat(32) })],
    ['short token', withValue('auth.tokens', { alice: 'short' })],
    ['networkPolicy typo', withValue('networkPolicy.ingresFrom', [])],
    ['unknown peer key', withValue('networkPolicy.ingressFrom', [{ podselector: {} }] as Json)],
    ['empty peer', withValue('networkPolicy.ingressFrom', [{}] as Json)],
    [
      'bad selector operator',
      withValue('networkPolicy.metricsFrom', [
        { podSelector: { matchExpressions: [{ key: 'a', operator: 'Is' }] } },
      ] as Json),
    ],
    ['engine port out of range', withValue('networkPolicy.egress.enginePort', 70000)],
    ['engine port as a name', withValue('networkPolicy.egress.enginePort', 'docker')],
    [
      'bad egress protocol',
      withValue('networkPolicy.egress.extra', [{ ports: [{ port: 443, protocol: 'HTTP' }] }] as Json),
    ],
  ];
  for (const [what, data] of rejected) assert.notDeepEqual(errorsOf(data), [], `${what} must be rejected`);
  const typo = errorsOf({ ...values, iamge: { tag: 'latest' } }).join('\n');
  assert.match(typo, /additionalProperty":"iamge"/, 'the error names the unknown key');

  const external = withValue('docker.mode', 'external');
  (external['docker'] as Record<string, Json>)['host'] = 'tcp://docker-engine:2375';
  assert.deepEqual(errorsOf(external), [], 'external mode with a host is accepted');
  assert.deepEqual(errorsOf(withValue('auth.tokens', { alice: 'a'.repeat(32), 'bob.ci': 'b'.repeat(40) })), []);
  assert.deepEqual(errorsOf(withValue('terminationGracePeriodSeconds', 60)), []);

  // external mode with a restricting policy must name the engine's peers.
  const externalPolicy = structuredClone(external);
  (externalPolicy['networkPolicy'] as Record<string, Json>)['enabled'] = true;
  assert.match(errorsOf(externalPolicy).join('\n'), /\/networkPolicy\/egress\/engine must NOT have fewer than 1 items/);
  ((externalPolicy['networkPolicy'] as Record<string, Json>)['egress'] as Record<string, Json>)['engine'] = [
    { ipBlock: { cidr: '10.0.0.5/32' } },
  ];
  assert.deepEqual(errorsOf(externalPolicy), []);
});

test('every object in the schema forbids unknown keys (or types its map values)', () => {
  // Kubernetes objects passed through whole; the API server checks their contents.
  const opaque = new Set([
    'properties.affinity.properties.nodeAffinity',
    'properties.affinity.properties.podAffinity',
    'properties.affinity.properties.podAntiAffinity',
    'properties.server.properties.extraEnv.items.properties.valueFrom.properties.secretKeyRef',
    'properties.server.properties.extraEnv.items.properties.valueFrom.properties.configMapKeyRef',
    'properties.server.properties.extraEnv.items.properties.valueFrom.properties.fieldRef',
    'properties.server.properties.extraEnv.items.properties.valueFrom.properties.resourceFieldRef',
  ]);
  const open: string[] = [];
  const walk = (node: unknown, path: string): void => {
    if (!isObject(node)) return;
    if (node['type'] === 'object' && !('additionalProperties' in node) && !opaque.has(path))
      open.push(path || '(root)');
    if (node['additionalProperties'] === true) open.push(path);
    for (const [k, v] of Object.entries(node)) {
      // Conditions (if/then/else) only add constraints to objects defined elsewhere.
      if (k === 'if' || k === 'then' || k === 'else') continue;
      if (!Array.isArray(v)) walk(v, `${path}.${k}`.replace(/^\./, ''));
      else for (const [i, item] of v.entries()) walk(item, `${path}.${k}.${i}`.replace(/^\./, ''));
    }
  };
  walk(schema, '');
  assert.deepEqual(open, []);
});

test('templates reference only values defined in values.yaml, and every value is used', () => {
  const refs = referencedValuePaths();
  assert.ok(refs.size > 40, `found ${refs.size} value references`);
  const missing = [...refs].filter(([path]) => !hasPath(values, path.split('.'))).map(([p, f]) => `${f}: .Values.${p}`);
  assert.deepEqual(missing, []);
  const used = [...refs.keys()];
  const unused = leafPaths(values)
    .map((p) => p.join('.'))
    .filter((leaf) => !used.some((ref) => leaf === ref || leaf.startsWith(`${ref}.`)));
  assert.deepEqual(unused, [], 'values.yaml keys no template reads');
});
