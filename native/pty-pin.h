/*
 * Co-location of a terminal stream (see "Co-location" at the top of pty-relay.c): while output
 * streams fast (FAST_BYTES within FAST_US), the terminal's foreground process group and its
 * reader (pty-relay, or the exec agent) are gathered on the CPU the reader runs on, and given the
 * reader's own CPU set back once output has been quiet for UNPIN_QUIET_US. It changes what the
 * command sees (its CPU affinity), so the server does it only when the operator asks
 * (`--pty-pin`). Included by pty-relay.c and exec-agent.c (each one translation unit).
 */
#define FAST_BYTES (1024 * 1024)
#define FAST_US 20000
#define UNPIN_QUIET_US 100000

/* Sets the CPU set of every thread of every process that `member` accepts; errors are ignored
 * (a process may be gone, or out of our reach: it then just keeps its CPUs). */
static void set_affinity_where(int (*member)(pid_t, pid_t), pid_t key, const cpu_set_t *set) {
  DIR *proc = opendir("/proc");
  if (!proc) return;
  struct dirent *d;
  while ((d = readdir(proc)) != NULL) {
    pid_t p = (pid_t)atoi(d->d_name);
    if (p <= 0 || !member(p, key)) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)p);
    DIR *tasks = opendir(path);
    if (!tasks) continue;
    struct dirent *t;
    while ((t = readdir(tasks)) != NULL) {
      pid_t tid = (pid_t)atoi(t->d_name);
      if (tid > 0) (void)sched_setaffinity(tid, sizeof *set, set);
    }
    closedir(tasks);
  }
  closedir(proc);
}

static int in_group(pid_t p, pid_t pgrp) { return getpgid(p) == pgrp; }
static int in_session(pid_t p, pid_t sid) { return getsid(p) == sid; }

static cpu_set_t own_cpus;
static int pinned, no_pin;

/* The reader's own CPU set, kept to give back; 0 when there is nothing to gather on (one CPU,
 * or an unknown set). Called before any pin. */
static int pin_init(void) {
  return sched_getaffinity(0, sizeof own_cpus, &own_cpus) == 0 && CPU_COUNT(&own_cpus) >= 2;
}

/* The gather itself, for a terminal whose output is fast: cheap once pinned or when there is
 * nothing to do. 1 when this call pinned. */
static int pin(int master) {
  if (no_pin || pinned) return 0;
  pid_t pgrp = tcgetpgrp(master);
  int cpu = sched_getcpu();
  if (pgrp <= 0 || cpu < 0) return 0;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  set_affinity_where(in_group, pgrp, &one);
  (void)sched_setaffinity(0, sizeof one, &one);
  pinned = 1;
  return 1;
}

/* Everything in the command's session gets the relay's CPU set back, children forked meanwhile too. */
static void unpin(pid_t session) {
  if (!pinned) return;
  set_affinity_where(in_session, session, &own_cpus);
  (void)sched_setaffinity(0, sizeof own_cpus, &own_cpus);
  pinned = 0;
}

/* A terminal's recent output, to tell a fast stream (FAST_BYTES within FAST_US) from the rest. */
typedef struct {
  long long since_us, bytes;
} pin_pace;

/* Counts `n` bytes read from `master` at `now_us` and gathers the terminal once they make a fast
 * stream. 1 when this call pinned. */
static int pin_when_fast(pin_pace *pace, int master, long long now_us, long long n) {
  if (no_pin) return 0;
  if (now_us - pace->since_us > FAST_US) pace->since_us = now_us, pace->bytes = 0;
  pace->bytes += n;
  return pace->bytes >= FAST_BYTES && pin(master);
}
