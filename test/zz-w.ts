import { startServer, TestSession } from '/work/main/test/support/harness.ts';
for (const cold of [false, true]) {
  const server = await startServer({ coldSandbox: cold });
  let bad = 0;
  for (let i = 0; i < 60; i++) {
    const s = await TestSession.open(server.url, {});
    const r = await s.run('p', ['sh', '-c', 'echo to-out; echo to-err >&2; exit 7']);
    if (r.stdout !== 'to-out\n' || r.stderr !== 'to-err\n') { bad++; if (bad < 4) console.log(cold ? 'cold' : 'warm', i, JSON.stringify(r.stdout), JSON.stringify(r.stderr), r.exited); }
    await s.close();
  }
  console.log(cold ? 'cold' : 'warm', 'bad', bad);
  await server.close();
}
