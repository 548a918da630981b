/**
 * Particular values of the chart rendered by real helm binaries (Helm 3 and Helm 4, see
 * helm-binary.ts): the audit log's settings, the external engine's port in the NetworkPolicy,
 * NOTES.txt's warnings (Helm 4 renders it without a cluster), and helm's own refusals (schema,
 * fail) of the bad combinations. Linting, the API schemas and the security settings of every
 * ci/*-values.yaml are in render.test.ts.
 *
 * Under CI=true a helm binary that cannot be had fails; elsewhere these tests are skipped.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import type { INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { HELM_RELEASES } from './helm-binary.ts';
import { chart, ciDir, helm, helmSuite, one, RELEASE, render } from './helm-render.ts';

for (const release of HELM_RELEASES) {
  describe(`helm ${release.version}`, () => {
    const suite = helmSuite(release);

    test('audit.log: off by default, stdout, or a file per pod on its own volume, rotated to fit it', {
      timeout: 120_000,
    }, async (t) => {
      if (!suite.ready(t)) return;
      const server = async (args: string[]) => {
        const spec = one<IDeployment>(await render(suite.bin, args), 'Deployment').spec?.template.spec;
        const c = spec?.containers.find((x) => x.name === 'exec-server');
        const env = Object.fromEntries((c?.env ?? []).map((e) => [e.name, e.value]));
        return { env, mounts: c?.volumeMounts ?? [], volumes: spec?.volumes ?? [] };
      };
      assert.equal((await server([])).env['EXEC_SERVER_AUDIT_LOG'], undefined);
      assert.equal((await server(['--set', 'audit.log=stdout'])).env['EXEC_SERVER_AUDIT_LOG'], '-');
      const file = await server(['-f', join(ciDir, 'audit-values.yaml'), '--set', 'audit.existingClaim=audit-pvc']);
      assert.equal(file.env['EXEC_SERVER_AUDIT_LOG'], '/var/log/exec-server/$(POD_NAME).jsonl');
      assert.equal(file.env['EXEC_SERVER_AUDIT_QUEUE_LINES'], '5000');
      // A file is rotated so that the pod's volume holds it: 9 files of 100 MiB by default.
      assert.equal(file.env['EXEC_SERVER_AUDIT_LOG_MAX_BYTES'], '104857600');
      assert.equal(file.env['EXEC_SERVER_AUDIT_LOG_MAX_FILES'], '8');
      const stdout = await server(['--set', 'audit.log=stdout']);
      assert.equal(stdout.env['EXEC_SERVER_AUDIT_LOG_MAX_BYTES'], undefined, 'standard output is never rotated');
      const kept = await server(['-f', join(ciDir, 'audit-values.yaml'), '--set', 'audit.maxFiles=0']);
      assert.equal(kept.env['EXEC_SERVER_AUDIT_LOG_MAX_FILES'], '0');
      const tooSmall = await helm(suite.bin, ['template', RELEASE, chart, '--set', 'audit.maxBytes=65536']);
      assert.notEqual(tooSmall.code, 0, 'a file smaller than 1 MiB is refused by the schema');
      assert.match(tooSmall.out, /maxBytes/);
      assert.ok(file.mounts.some((m) => m.name === 'audit' && m.mountPath === '/var/log/exec-server'));
      const volume = file.volumes.find((v) => v.name === 'audit');
      assert.equal(volume?.persistentVolumeClaim?.claimName, 'audit-pvc');
      const bad = await helm(suite.bin, ['template', RELEASE, chart, '--set', 'audit.log=syslog']);
      assert.notEqual(bad.code, 0);
    });

    test('the external engine port in the policy: docker.host, its scheme default, or enginePort', {
      timeout: 120_000,
    }, async (t) => {
      if (!suite.ready(t)) return;
      const external = ['-f', join(ciDir, 'external-values.yaml')];
      const cases: Array<[string[], number]> = [
        [[], 2375],
        [['--set', 'docker.host=tcp://10.0.0.5:12375'], 12375],
        [['--set', 'docker.host=tcp://10.0.0.5'], 2375],
        [['--set', 'docker.host=https://engine.example'], 2376],
        [['--set', 'networkPolicy.egress.enginePort=2376'], 2376],
      ];
      for (const [args, port] of cases) {
        const np = one<INetworkPolicy>(await render(suite.bin, [...external, ...args]), 'NetworkPolicy').spec;
        const rules = np?.egress ?? [];
        assert.equal(rules.length, 2, `DNS and the engine: ${args.join(' ')}`);
        assert.deepEqual(rules[1]?.ports, [{ port, protocol: 'TCP' }], args.join(' '));
      }
      const r = await helm(suite.bin, [
        'template',
        RELEASE,
        chart,
        ...external,
        '--set',
        'networkPolicy.egress.enginePort=0',
      ]);
      assert.notEqual(r.code, 0, 'port 0 is refused');
      assert.match(r.out, /enginePort/);
    });

    // Only Helm 4 renders NOTES.txt without a cluster (`install --dry-run=client`).
    if (release.version.startsWith('v4')) {
      test('NOTES.txt warns of a policy that shuts out the registry or the scraper', {
        timeout: 120_000,
      }, async (t) => {
        if (!suite.ready(t)) return;
        const notes = async (args: string[]): Promise<string> => {
          const r = await helm(suite.bin, ['install', RELEASE, chart, '--dry-run=client', ...args]);
          assert.equal(r.code, 0, r.out);
          return r.out.slice(r.out.indexOf('NOTES:'));
        };
        const registry = /the engine cannot reach a registry/;
        const scraper = /Prometheus can scrape only if ingressFrom lets it in/;
        const closed = await notes([
          '--set',
          'docker.mode=dind',
          '--set',
          'networkPolicy.enabled=true',
          '-f',
          join(ciDir, 'servicemonitor-values.yaml'),
        ]);
        assert.match(closed, /^NOTES:/);
        assert.match(closed, registry);
        assert.match(closed, scraper);
        const open = await notes(['-f', join(ciDir, 'networkpolicy-values.yaml')]);
        assert.doesNotMatch(open, registry, 'egress.extra allows the registry');
        assert.doesNotMatch(await notes([]), registry, 'no policy, no warning');
      });
    }

    test('helm refuses bad values with a clear message', { timeout: 120_000 }, async (t) => {
      if (!suite.ready(t)) return;
      const refused: Array<[string[], RegExp]> = [
        [['--set', 'iamge.tag=x'], /iamge/],
        [
          ['--set', 'terminationGracePeriodSeconds=5'],
          /must exceed server\.preStopSeconds plus server\.shutdownGraceMs/,
        ],
        [
          ['--set', 'docker.mode=external', '--set', 'docker.host=tcp://e:2375', '--set', 'networkPolicy.enabled=true'],
          /engine/,
        ],
        [
          ['--set', 'networkPolicy.enabled=true', '--set', 'networkPolicy.ingressFrom[0].podselector.app=x'],
          /podselector/,
        ],
      ];
      for (const [args, message] of refused) {
        const r = await helm(suite.bin, ['template', RELEASE, chart, ...args]);
        assert.notEqual(r.code, 0, `refused: ${args.join(' ')}`);
        assert.match(r.out, message, args.join(' '));
      }
      // The template's own check, for installs that skip schema validation.
      const skip = await helm(suite.bin, [
        'template',
        RELEASE,
        chart,
        '--skip-schema-validation',
        '--set',
        'docker.mode=external',
        '--set',
        'docker.host=tcp://e:2375',
        '--set',
        'networkPolicy.enabled=true',
      ]);
      assert.notEqual(skip.code, 0);
      assert.match(skip.out, /networkPolicy\.egress\.engine must name the external engine's peers/);
    });
  });
}
