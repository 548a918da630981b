/**
 * The chart rendered by the real helm binaries (helm-binary.ts), for render.test.ts and
 * render-values.test.ts: one suite per Helm release, whose tests fail under CI=true when its
 * binary cannot be had (and are skipped elsewhere); `helm template` parsed into objects.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { before } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { type HelmRelease, helmBinary, helmEnv } from './helm-binary.ts';

const run = promisify(execFile);
const IN_CI = process.env['CI'] === 'true' || process.env['CI'] === '1';
const root = fileURLToPath(new URL('../../', import.meta.url));
export const chart = join(root, 'helm', 'exec-server');
export const ciDir = join(chart, 'ci');
export const RELEASE = 'exec-server';
export const NAMESPACE = 'exec-server';

export type Obj = Record<string, unknown> & { apiVersion: string; kind: string; metadata: { name: string } };
export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** One release's binary, found before its suite's tests run. */
export interface HelmSuite {
  /** The binary's path (empty until found). */
  readonly bin: string;
  /** False, with the test skipped, when the binary cannot be had (outside CI). */
  ready(t: { skip(message?: string): void }): boolean;
}

/** Finds `release`'s binary before the tests of the suite this is called in. */
export function helmSuite(release: HelmRelease): HelmSuite {
  let bin = '';
  let unavailable: string | undefined;
  before(async () => {
    try {
      bin = await helmBinary(release);
    } catch (err) {
      unavailable = `helm ${release.version} cannot be had: ${(err as Error).message}`;
      if (IN_CI) throw new Error(unavailable);
    }
  });
  return {
    get bin() {
      return bin;
    },
    ready(t) {
      if (unavailable === undefined) return true;
      t.skip(unavailable);
      return false;
    },
  };
}

/** Runs helm; its exit code and its output (stdout then stderr). */
export async function helm(bin: string, args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run(bin, args, { timeout: 60_000, maxBuffer: 16 * 1024 * 1024, env: helmEnv });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

/** `helm template` of the chart with `args`, the objects it renders (it must succeed). */
export async function render(bin: string, args: string[], apiVersions = ['monitoring.coreos.com/v1']): Promise<Obj[]> {
  const r = await helm(bin, [
    'template',
    RELEASE,
    chart,
    '--namespace',
    NAMESPACE,
    ...apiVersions.flatMap((a) => ['--api-versions', a]),
    ...args,
  ]);
  assert.equal(r.code, 0, `helm template ${args.join(' ')} failed:\n${r.out}`);
  return parseAllDocuments(r.out)
    .map((d) => d.toJS() as unknown)
    .filter((o): o is Obj => isObject(o));
}

/** The one object of `kind` in `objects`. */
export function one<T>(objects: Obj[], kind: string): T {
  const found = objects.filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `one ${kind}`);
  return found[0] as unknown as T;
}
