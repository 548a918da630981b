/**
 * A real server (local backend) rotating its audit log by size: every file within
 * `--audit-log-max-bytes`, at most `--audit-log-max-files` rotated ones kept, a restart that
 * appends to the newest file, and `exec-server audit verify` passing on the files together and
 * naming the file and line where a copy was changed.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { type ExecAnswer, newSession, serverWithApi } from '../http/helpers.ts';
import { auditVerify } from './audit-cli.ts';

const MiB = 1024 * 1024;

test('a server rotates its audit log by size, keeps the files it is told to, and verify checks them together', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'audit-rotation-'));
  const path = join(dir, 'audit.jsonl');
  const flags = ['--audit-log', path, '--audit-log-max-bytes', String(MiB), '--audit-log-max-files', '2'];
  const api = await serverWithApi(t, { flags });
  const id = await newSession(api);
  // About 50 KB a start line (an argv string this long is kept whole): 70 of them make 3.5 MB.
  const long = 'x'.repeat(50_000);
  for (let i = 0; i < 70; i++) {
    const r = await api<ExecAnswer>('POST', `/v1/sessions/${id}/exec_command`, {
      login: false,
      cmd: `true ${i} ${long}`,
      yield_time_ms: 5000,
    });
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    assert.equal(r.body.exit_code, 0);
  }
  assert.equal((await api('GET', '/readyz')).status, 200);
  await api.server.close();
  // A restart appends to the newest file, whose chain goes on.
  const again = await serverWithApi(t, { flags });
  await newSession(again);
  await again.server.close();

  const names = (await readdir(dir)).sort();
  assert.deepEqual(names, ['audit.jsonl', 'audit.jsonl.1', 'audit.jsonl.2']);
  for (const name of names) assert.ok((await stat(join(dir, name))).size <= MiB, name);
  const files = [`${path}.2`, `${path}.1`, path];
  const ok = auditVerify(...files);
  assert.equal(ok.status, 0, ok.out);
  assert.match(ok.out, /line 1 goes on from a rotated file/);
  assert.match(ok.out, /^ok: 3 files, \d+ lines, chain intact; head [0-9a-f]{64}$/m);
  const starts = (await readFile(path, 'utf8')).split('\n').filter((l) => l.includes('"audit.start"'));
  assert.equal(starts.length, 1, 'the restart appended its start to the newest file');
  const newest = auditVerify(path);
  assert.equal(newest.status, 0, newest.out);

  // A copy of the middle file with one byte changed: verify names that file and line.
  const text = await readFile(`${path}.1`, 'utf8');
  const at = text.search(/"true \d+ x/);
  assert.ok(at > 0, 'a start line is in the middle file');
  const copy = join(dir, 'edited.jsonl');
  await writeFile(copy, `${text.slice(0, at + 1)}T${text.slice(at + 2)}`);
  const broken = auditVerify(`${path}.2`, copy, path);
  assert.equal(broken.status, 1, broken.out);
  assert.match(
    broken.out,
    new RegExp(`^${copy.replace(/[.]/g, '\\.')}: broken at line \\d+: line \\d+ was edited`, 'm'),
  );
});
