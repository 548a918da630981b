/*
 * pty-relay's co-location (see "Co-location" at the top of pty-relay.c): the terminal's
 * foreground process group and the relay gathered on one CPU while output streams fast.
 * Included by pty-relay.c (one translation unit, as the other native helpers).
 */
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

/* Called on every read while output is fast: cheap once pinned or when there is nothing to do. */
static void pin(int master) {
  if (no_pin || pinned) return;
  pid_t pgrp = tcgetpgrp(master);
  int cpu = sched_getcpu();
  if (pgrp <= 0 || cpu < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  set_affinity_where(in_group, pgrp, &one);
  (void)sched_setaffinity(0, sizeof one, &one);
  pinned = 1;
}

/* Everything in the command's session gets the relay's CPU set back, children forked meanwhile too. */
static void unpin(pid_t session) {
  if (!pinned) return;
  set_affinity_where(in_session, session, &own_cpus);
  (void)sched_setaffinity(0, sizeof own_cpus, &own_cpus);
  pinned = 0;
}
