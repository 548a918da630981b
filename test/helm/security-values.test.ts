/**
 * The chart's security values (ci/security-values.yaml) reach the server as the variables it
 * reads, and the server accepts what they render: `--allowed-sandbox-types`, `--allowed-origins`,
 * `--preview-host`. Unset, none of them is rendered (the server's defaults apply).
 * Under CI=true a helm binary that cannot be had fails; elsewhere this test is skipped.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../../src/config.ts';
import { HELM_RELEASES, helmBinary } from './helm-binary.ts';

const run = promisify(execFile);
const IN_CI = process.env['CI'] === 'true' || process.env['CI'] === '1';
const chart = fileURLToPath(new URL('../../helm/exec-server', import.meta.url));

interface Env {
  name: string;
  value?: string;
}

async function serverEnv(bin: string, args: string[]): Promise<Map<string, string | undefined>> {
  const { stdout } = await run(bin, ['template', 'exec-server', chart, ...args], { maxBuffer: 16 * 1024 * 1024 });
  const docs = parseAllDocuments(stdout).map((d) => d.toJS() as Record<string, unknown>);
  const dep = docs.find((d) => d?.['kind'] === 'Deployment') as
    | { spec: { template: { spec: { containers: Array<{ name: string; env?: Env[] }> } } } }
    | undefined;
  const server = dep?.spec.template.spec.containers.find((c) => c.name === 'exec-server');
  assert.ok(server, 'the exec-server container');
  return new Map((server.env ?? []).map((e) => [e.name, e.value]));
}

test('chart: allowed sandbox types, allowed origins and the preview host reach the server', async (t) => {
  let bin: string;
  try {
    bin = await helmBinary(HELM_RELEASES[0]!);
  } catch (err) {
    if (IN_CI) throw err;
    t.skip(`no helm binary: ${(err as Error).message}`);
    return;
  }
  const set = await serverEnv(bin, ['-f', join(chart, 'ci', 'security-values.yaml')]);
  assert.equal(set.get('EXEC_SERVER_ALLOWED_SANDBOX_TYPES'), 'workspace-write,read-only,ops:danger-full-access');
  assert.equal(set.get('EXEC_SERVER_ALLOWED_ORIGINS'), 'https://agents.example.com');
  assert.equal(set.get('EXEC_SERVER_PREVIEW_HOST'), 'preview.example.com');
  const env = Object.fromEntries([...set].filter((e): e is [string, string] => e[1] !== undefined));
  const config = loadConfig(['--token', 't'], env);
  assert.equal(config.allowedSandboxTypes, 'workspace-write,read-only,ops:danger-full-access');
  assert.equal(config.previewHost, 'preview.example.com');

  const unset = await serverEnv(bin, []);
  for (const name of ['EXEC_SERVER_ALLOWED_SANDBOX_TYPES', 'EXEC_SERVER_ALLOWED_ORIGINS', 'EXEC_SERVER_PREVIEW_HOST'])
    assert.equal(unset.has(name), false, name);
});
