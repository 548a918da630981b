/**
 * A hostile exec agent (docs/security-agent-link.md, "Frames from the agent are untrusted"): a
 * tenant that is root in its own container (`danger-full-access`) kills its agent, takes the
 * link secret from the server's own `exec-agent start` (it listens where the daemon did) and
 * speaks the agent protocol to the server itself. Whatever it sends may end its own session's
 * commands, never the server, another session, or the server's memory. Against a real server
 * and engine; the fake agent is a small static C program the tenant copies in.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import { startServer, TestSession, type TestServer } from '../support/harness.ts';
import { dockerTestOptions } from './engine.ts';

const ROOT = { sandbox: { type: 'danger-full-access' } };
const options = { ...dockerTestOptions, timeout: dockerTestOptions.skip ? 1000 : 180_000 };

/**
 * The fake agent. `fake-agent MODE` forks away from its command, kills the real daemon, listens
 * on the daemon's socket for the server's `exec-agent start` (which brings the secret and the
 * link's path), dials the link with them, answers the hello, then by MODE:
 * `short`: an empty list, SPAWNED for the next spawn, then OUTPUT shorter than its offset field;
 * `flood`: a kept process, then its "retained output" without end, never LIST_END;
 * `tunnel`: an empty list, the egress proxy "listening", then 20000 TUNNEL frames, counting the
 * tunnel processes the server asks it to spawn in the next 3 s.
 * It logs to /tmp/fake-agent.log what happened (how much it wrote before the server closed).
 */
const FAKE_AGENT_C = String.raw`
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
static int rd(int s, void *b, size_t n) { size_t g = 0; while (g < n) { ssize_t r = read(s, (char *)b + g, n - g); if (r <= 0) return -1; g += (size_t)r; } return 0; }
static int wr(int s, const void *b, size_t n) { size_t g = 0; while (g < n) { ssize_t r = send(s, (const char *)b + g, n - g, MSG_NOSIGNAL); if (r <= 0) return -1; g += (size_t)r; } return 0; }
static int send_frame(int s, int type, int stream, uint32_t handle, const void *p, uint32_t len) {
  unsigned char h[12] = {0}; memcpy(h, &len, 4); h[4] = (unsigned char)type; h[5] = (unsigned char)stream; memcpy(h + 8, &handle, 4);
  return wr(s, h, 12) < 0 || (len && wr(s, p, len) < 0) ? -1 : 0;
}
static unsigned char pay[1 << 20];
static int read_frame(int s, int *type, uint32_t *handle) {
  unsigned char h[12]; uint32_t len; if (rd(s, h, 12) < 0) return -1; memcpy(&len, h, 4); memcpy(handle, h + 8, 4); *type = h[4];
  if (len > sizeof pay) return -1;
  return rd(s, pay, len) < 0 ? -1 : (int)len;
}
static void kill_daemon(void) {
  DIR *d = opendir("/proc"); struct dirent *e; char p[64], c[256];
  while (d && (e = readdir(d))) {
    int pid = atoi(e->d_name); if (pid <= 1 || pid == getpid()) continue;
    snprintf(p, sizeof p, "/proc/%d/cmdline", pid); int f = open(p, O_RDONLY); if (f < 0) continue;
    ssize_t n = read(f, c, sizeof c - 1); close(f); if (n <= 0) continue; c[n] = 0;
    if (strstr(c, "exec-agent")) kill(pid, SIGKILL);
  }
  if (d) closedir(d);
}
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "short";
  const char *sock = "/run/exec-server/r/agent.sock";
  if (fork() != 0) return 0;
  setsid();
  int log = open("/tmp/fake-agent.log", O_WRONLY | O_CREAT | O_TRUNC, 0644); dup2(log, 1); dup2(log, 2); setvbuf(stdout, NULL, _IONBF, 0);
  alarm(120);
  usleep(300000);
  kill_daemon(); usleep(100000);
  unlink(sock);
  int l = socket(AF_UNIX, SOCK_STREAM, 0); struct sockaddr_un a = { .sun_family = AF_UNIX }; strcpy(a.sun_path, sock);
  if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0) { perror("bind"); return 1; }
  printf("listening\n");
  int c = accept(l, NULL, NULL); unsigned char u; unsigned char msg[32 + 108];
  if (rd(c, &u, 1) < 0 || u != 'u' || rd(c, msg, sizeof msg) < 0) { printf("bad start message\n"); return 1; }
  wr(c, "k", 1); close(c); close(l); unlink(sock);
  printf("got the secret\n");
  int s = socket(AF_UNIX, SOCK_STREAM, 0); struct sockaddr_un la = { .sun_family = AF_UNIX }; memcpy(la.sun_path, msg + 32, 107);
  if (connect(s, (struct sockaddr *)&la, sizeof la) < 0) { perror("link"); return 1; }
  wr(s, "EXAGLNK1", 8); wr(s, msg, 32);
  int type; uint32_t handle; int n;
  if (read_frame(s, &type, &handle) < 0 || type != 1) { printf("no hello\n"); return 1; }
  const char *hello = "version=1\npid=1\nprocesses=0\nidle=0\n"; send_frame(s, 1, 0, 0, hello, (uint32_t)strlen(hello));
  if (read_frame(s, &type, &handle) < 0 || type != 11) { printf("no list (%d)\n", type); return 1; }
  printf("listed\n");
  if (strcmp(mode, "flood") == 0) {
    /* A kept process, then its "retained output" without end, and never LIST_END. */
    const char rec[] = "none\n\0pipe\0" "4242\0" "0\0" "0\0" "0\0";
    send_frame(s, 8, 0, 1, rec, sizeof rec - 1);
    static unsigned char out[8 + 65536]; memset(out, 'x', sizeof out);
    uint64_t off = 0, total = 0;
    for (;;) {
      memcpy(out, &off, 8);
      if (send_frame(s, 4, 1, 1, out, sizeof out) < 0) break;
      off += 65536; total += 65536;
    }
    printf("closed after %llu MiB\n", (unsigned long long)(total >> 20));
    return 0;
  }
  send_frame(s, 9, 0, 0, NULL, 0);
  if (strcmp(mode, "tunnel") == 0) {
    /* Over a link the tunnels come in on the link: a TUNNEL frame there is not an agent's. */
    for (;;) {
      if (read_frame(s, &type, &handle) < 0) { printf("closed before egress\n"); return 0; }
      if (type == 13) break;
    }
    send_frame(s, 10, 0, handle, "port", 4);
    for (uint32_t id = 1; id <= 20000; id++) if (send_frame(s, 11, 0, 0, &id, 4) < 0) break;
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    int tunnels = 0;
    struct timeval tv = { 3, 0 }; setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    while ((n = read_frame(s, &type, &handle)) >= 0)
      if (type == 2 && memmem(pay, (size_t)n, "tunnel", 6) != NULL) tunnels++;
    printf("tunnel spawns %d\n", tunnels);
    return 0;
  }
  for (;;) {
    if ((n = read_frame(s, &type, &handle)) < 0) { printf("closed before a spawn\n"); return 0; }
    if (type == 2) break;
  }
  printf("spawn for handle %u\n", handle);
  send_frame(s, 2, 0, handle, "4242", 4);
  /* OUTPUT whose payload is shorter than its u64 offset. */
  send_frame(s, 4, 1, handle, "hi", 2);
  while (read_frame(s, &type, &handle) >= 0) {}
  printf("closed by the server\n");
  return 0;
}
`;

async function buildFakeAgent(t: TestContext): Promise<Buffer> {
  const dir = await mkdtemp(join(tmpdir(), 'exec-server-fake-agent-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'fake-agent.c'), FAKE_AGENT_C);
  // Static, as the real agent is (scripts/build-native.sh): the test image has no libc to share.
  await promisify(execFile)('cc', ['-O2', '-static', '-o', join(dir, 'fake-agent'), join(dir, 'fake-agent.c')]);
  return readFile(join(dir, 'fake-agent'));
}

/** Copies the fake agent in (as any tenant can) and lets it take over the session's agent. */
async function takeOver(s: TestSession, binary: Buffer, mode: 'short' | 'flood' | 'tunnel'): Promise<void> {
  await s.request('fs/writeFile', { path: '/tmp/fake-agent', dataBase64: binary.toString('base64') });
  const r = await s.run('take-over', ['sh', '-c', `chmod +x /tmp/fake-agent && /tmp/fake-agent ${mode}`]);
  assert.equal(r.exited['exitCode'], 0, r.stderr);
  // The fake one listens where the daemon did; the server's next connection comes to it.
  for (let i = 0; i < 100; i++) {
    if ((await fakeLog(s)).includes('listening')) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail(`the fake agent did not take over: ${await fakeLog(s)}`);
}

async function fakeLog(s: TestSession): Promise<string> {
  const r = await s
    .request<{ dataBase64: string }>('fs/readFile', { path: '/tmp/fake-agent.log' })
    .catch(() => undefined);
  return r === undefined ? '' : Buffer.from(r.dataBase64, 'base64').toString('utf8');
}

async function setUp(
  t: TestContext,
): Promise<{ server: TestServer; victim: TestSession; attacker: TestSession; binary: Buffer }> {
  const binary = await buildFakeAgent(t);
  const server = await startServer({ backend: 'docker' });
  t.after(() => server.close());
  const victim = await TestSession.open(server.url, { session: ROOT });
  const attacker = await TestSession.open(server.url, { session: ROOT });
  t.after(() => Promise.all([victim.close(), attacker.close()]));
  return { server, victim, attacker, binary };
}

test('an OUTPUT frame shorter than its offset ends that connection, not the server', options, async (t) => {
  const { victim, attacker, binary } = await setUp(t);
  await victim.start('long', [
    'sh',
    '-c',
    'i=0; while [ $i -lt 40 ]; do echo v-$i; i=$((i+1)); sleep 0.1; done; exit 3',
  ]);
  await takeOver(attacker, binary, 'short');
  // The spawn goes to the fake agent, which answers SPAWNED, then the malformed OUTPUT.
  await attacker.start('victim-of-itself', ['true']);
  const own = await attacker.result('victim-of-itself', 60_000);
  // It ends (how depends on which agent the session reattaches to); the server closed the fake's link.
  assert.ok(['lost', 'exited'].includes(String(own.exited['terminal'])), JSON.stringify(own.exited));
  assert.match(await fakeLog(attacker), /closed by the server/);
  // The server and the other tenant are untouched; the attacker gets a real agent back.
  const long = await victim.result('long', 60_000);
  assert.equal(long.stdout, Array.from({ length: 40 }, (_, i) => `v-${i}\n`).join(''));
  assert.equal(long.exited['exitCode'], 3);
  const again = await attacker.run('again', ['echo', 'ok']);
  assert.equal(again.stdout, 'ok\n');
});

test('a list that never ends is cut off: the server keeps no unbounded replay', options, async (t) => {
  const { victim, attacker, binary } = await setUp(t);
  await takeOver(attacker, binary, 'flood');
  // The attach lists what the agent kept; the fake one streams "retained output" forever.
  await attacker.start('flooded', ['true']).catch(() => undefined);
  let log = '';
  for (let i = 0; i < 300 && !/closed after/.test(log); i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    log = await fakeLog(attacker);
  }
  const mib = Number(/closed after (\d+) MiB/.exec(log)?.[1] ?? Number.NaN);
  assert.ok(Number.isFinite(mib), `the server never closed the flooding connection: ${log}`);
  // Bounded by what an agent may legitimately replay, not by the listing's deadline.
  assert.ok(mib <= 256, `the server took ${mib} MiB of a list before closing it`);
  const r = await victim.run('still', ['echo', 'fine']);
  assert.equal(r.stdout, 'fine\n');
});

test('TUNNEL frames over a link start no tunnel process: a flood of them costs nothing', options, async (t) => {
  const binary = await buildFakeAgent(t);
  const server = await startServer({ backend: 'docker' });
  t.after(() => server.close());
  // A session with an egress allow-list: its agent is asked to run the proxy on every attach.
  const attacker = await TestSession.open(server.url, { session: { ...ROOT, network: { allow: ['127.0.0.2:9'] } } });
  t.after(() => attacker.close());
  await takeOver(attacker, binary, 'tunnel');
  await attacker.start('reattach', ['true']).catch(() => undefined);
  let log = '';
  for (let i = 0; i < 300 && !/tunnel spawns \d+/.test(log); i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    log = await fakeLog(attacker);
  }
  assert.match(log, /tunnel spawns 0\n/, log);
  const other = await TestSession.open(server.url, { session: ROOT });
  t.after(() => other.close());
  assert.equal((await other.run('still', ['echo', 'fine'])).stdout, 'fine\n');
});
