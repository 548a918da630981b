/*
 * The exec agent's SPAWN frame: the request parsed, a terminal or pipes, the fork, the
 * command's user and directory, and the child's start report.
 * Included by exec-agent.c (one translation unit: the build stays one compiler call).
 */
/* A start that cannot happen (cwd, program): the child says so on this pipe before it ends, and
 * the spawn is answered FAILED "spawn:ERRNO\0MESSAGE" instead of SPAWNED (docs/protocol.md). */
static int spawn_report = -1;
/* The umask commands run with: the one the daemon was started with (see start_daemon). */
static mode_t command_umask = 022;

static void child_spawn_fail(int code, const char *what, const char *arg, int err) {
  if (spawn_report >= 0) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "spawn:%d%c%s%s%s: %s", err, 0, what, arg ? " " : "", arg ? arg : "", strerror(err));
    if (n > 0) { ssize_t ignored = write(spawn_report, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)); (void)ignored; }
    _exit(code);
  }
  char msg[1024];
  int n = snprintf(msg, sizeof msg, "exec-server: %s%s%s: %s\n", what, arg ? ": " : "", arg ? arg : "", strerror(err));
  if (n > 0) { ssize_t ignored = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)); (void)ignored; }
  _exit(code);
}

static void child_fail(int code, const char *what, const char *arg, int err) {
  char msg[1024];
  int n = snprintf(msg, sizeof msg, "exec-server: %s%s%s: %s\n", what, arg ? ": " : "", arg ? arg : "", strerror(err));
  if (n > 0) { ssize_t ignored = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)); (void)ignored; }
  _exit(code);
}

/* A non-root command whose HOME it cannot read gets its home from /etc/passwd, else /tmp. */
static void fix_home(uid_t uid) {
  const char *home = getenv("HOME");
  if (uid == 0 || (home && access(home, R_OK | X_OK) == 0)) return;
  FILE *f = fopen("/etc/passwd", "r");
  char line[1024];
  while (f && fgets(line, sizeof line, f)) {
    /* name:password:uid:gid:gecos:home:shell */
    char *fields[7] = {0};
    char *c = line;
    int k = 0;
    while (k < 7) {
      fields[k++] = c;
      c += strcspn(c, ":\n");
      if (*c != ':') { *c = 0; break; }
      *c++ = 0;
    }
    if (k >= 6 && strtoul(fields[2], NULL, 10) == uid && fields[5][0] && access(fields[5], R_OK | X_OK) == 0) {
      setenv("HOME", fields[5], 1);
      fclose(f);
      return;
    }
  }
  if (f) fclose(f);
  setenv("HOME", "/tmp", 1);
}

/* A SPAWN frame's request; the strings point into the frame, argv and envp are allocated. */
typedef struct {
  const char *mode, *tag, *cwd, *arg0;
  int pty, with_stdin;
  uid_t uid;
  gid_t gid;
  struct winsize ws;
  char **argv, **envp;
} spawn_req;

/* A NULL-terminated list of `count` strings read from *c (each NUL-terminated, before `end`). */
static char **take_strings(char **c, const char *end, long count) {
  char **list = calloc((size_t)count + 1, sizeof *list);
  if (!list) return NULL;
  for (long k = 0; k < count; k++) {
    if (*c >= end) { free(list); return NULL; }
    list[k] = *c;
    *c += strlen(*c) + 1;
  }
  return list;
}

/*
 * Parses the fields, each NUL-terminated: mode rows cols uid gid cwd arg0 argc argv... envc
 * env... tag. 0, or -1 with the reason in `why`; r->argv and r->envp are the caller's to free.
 */
static int parse_spawn(spawn_req *r, unsigned char *payload, uint32_t len, char *why, size_t cap) {
  snprintf(why, cap, "malformed spawn frame");
  if (len == 0 || payload[len - 1] != 0) return -1;
  char *f[8];
  char *c = (char *)payload, *end = (char *)payload + len;
  for (int k = 0; k < 8; k++) { if (c >= end) return -1; f[k] = c; c += strlen(c) + 1; }
  long argc = strtol(f[7], NULL, 10);
  if (argc < 1 || argc > 65536) { snprintf(why, cap, "bad argc"); return -1; }
  if (!(r->argv = take_strings(&c, end, argc)) || c >= end) return -1;
  long envc = strtol(c, NULL, 10);
  c += strlen(c) + 1;
  if (envc < 0 || envc > 65536) { snprintf(why, cap, "bad envc"); return -1; }
  if (!(r->envp = take_strings(&c, end, envc))) return -1;
  r->tag = c < end ? c : "";
  r->mode = f[0];
  r->pty = strcmp(r->mode, "pty") == 0;
  r->with_stdin = strcmp(r->mode, "pipe") == 0;
  if (!r->pty && !r->with_stdin && strcmp(r->mode, "pipe-no-stdin") != 0) {
    snprintf(why, cap, "unknown mode %s", r->mode);
    return -1;
  }
  r->ws = (struct winsize){ .ws_row = (unsigned short)strtoul(f[1], NULL, 10), .ws_col = (unsigned short)strtoul(f[2], NULL, 10) };
  r->uid = (uid_t)strtoul(f[3], NULL, 10);
  r->gid = (gid_t)strtoul(f[4], NULL, 10);
  r->cwd = f[5];
  r->arg0 = f[6];
  return 0;
}

/* A free process record; when all are used, the oldest reported exit's (a server that never
 * said FORGET). -1 when every record is a live process. */
static int free_slot(void) {
  int slot = -1;
  for (int i = 0; i < MAX_PROCS; i++) if (!procs[i].used) return i;
  long long oldest = 0;
  for (int i = 0; i < MAX_PROCS; i++)
    if (procs[i].reported && (slot < 0 || procs[i].exited_at < oldest)) { slot = i; oldest = procs[i].exited_at; }
  if (slot >= 0) free_proc(&procs[slot]);
  return slot;
}

/* A command's standard streams before the fork: a terminal, or pipes. */
typedef struct {
  int out[2], err[2], in[2], master;
  char slave_name[64];
} spawn_io;

static void close_io(spawn_io *io) {
  close_fd(&io->master);
  for (int k = 0; k < 2; k++) { close_fd(&io->out[k]); close_fd(&io->err[k]); close_fd(&io->in[k]); }
}

/* Opens the terminal or the pipes: 0, or the errno with `what` naming what failed. */
static int open_io(spawn_io *io, const spawn_req *r, const char **what) {
  if (r->pty) {
    *what = "no terminal";
    io->master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    int unlock = 0, n = -1;
    if (io->master < 0 || ioctl(io->master, TIOCSPTLCK, &unlock) < 0 || ioctl(io->master, TIOCGPTN, &n) < 0) {
      int e = errno;
      close_io(io);
      return e;
    }
    snprintf(io->slave_name, sizeof io->slave_name, "/dev/pts/%d", n);
    ioctl(io->master, TIOCSWINSZ, &r->ws);
    return 0;
  }
  *what = "pipe";
  if (pipe2(io->out, O_CLOEXEC) < 0 || pipe2(io->err, O_CLOEXEC) < 0 || (r->with_stdin && pipe2(io->in, O_CLOEXEC) < 0)) {
    int e = errno;
    close_io(io);
    return e;
  }
  /* A pipe is 0600 for its maker (root), and opening /dev/stdout goes through the pipe's own mode:
   * a command running as the container's user got EACCES. Reaching a pipe by name takes access to
   * /proc/PID/fd of a holder, so the mode opens nothing more. */
  int *ends[] = { io->out, io->err, io->in };
  for (int k = 0; k < 6; k++) if (ends[k / 2][k % 2] >= 0) (void)fchmod(ends[k / 2][k % 2], 0666);
  return 0;
}

/* The forked child: its streams, session, user and directory, then the program. Never returns. */
static void exec_child(spawn_req *r, const spawn_io *io, int report_fd) {
  spawn_report = report_fd;
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  for (int s = 1; s < 32; s++) signal(s, SIG_DFL);
  /* Started while a terminal stream holds the agent on one CPU: the command gets the CPUs the
   * agent started with, as every other command does. */
  if (pinned) (void)sched_setaffinity(0, sizeof own_cpus, &own_cpus);
  umask(command_umask);
  setsid();
  if (r->pty) {
    int slave = open(io->slave_name, O_RDWR);
    if (slave < 0) child_fail(126, "open terminal", io->slave_name, errno);
    ioctl(slave, TIOCSCTTY, 0);
    if (r->uid != 0) { int ignored = fchown(slave, r->uid, (gid_t)-1); (void)ignored; }
    dup2(slave, 0); dup2(slave, 1); dup2(slave, 2);
    if (slave > 2) close(slave);
  } else {
    int devnull = open("/dev/null", O_RDONLY);
    dup2(r->with_stdin ? io->in[0] : devnull, 0);
    dup2(io->out[1], 1);
    dup2(io->err[1], 2);
    if (devnull > 2) close(devnull);
  }
  if (r->uid != 0 || r->gid != 0) {
    if (setgroups(1, &r->gid) < 0 || setgid(r->gid) < 0 || setuid(r->uid) < 0) child_fail(126, "cannot switch user", NULL, errno);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  }
  /* After the uid change (which clears it): the command dies with the agent, never orphaned. */
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() == 1) _exit(137);
  environ = r->envp;
  fix_home(r->uid);
  if (chdir(r->cwd) < 0) child_spawn_fail(126, "cwd", r->cwd, errno);
  const char *file = r->argv[0];
  if (r->arg0[0]) r->argv[0] = (char *)r->arg0;
  execvp(file, r->argv);
  child_spawn_fail(errno == ENOENT ? 127 : 126, file, NULL, errno);
}

/* What the child reported before its exec closed the pipe (CLOEXEC): 0 bytes when it started. */
static size_t start_report(int fd, char *why, size_t cap) {
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, why + got, cap - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
    if (got == cap - 1) break;
  }
  return got;
}

/* The started command's record: the parent's ends of its streams, non-blocking. */
static void install_proc(int slot, uint32_t handle, pid_t pid, const spawn_req *r, spawn_io *io) {
  proc *p = &procs[slot];
  memset(p, 0, sizeof *p);
  p->used = 1;
  p->handle = handle;
  p->pid = pid;
  p->pty = r->pty;
  snprintf(p->mode, sizeof p->mode, "%s", r->mode);
  p->tag = strdup(r->tag);
  p->last_data = now_ms();
  if (r->pty) {
    p->fds[0] = io->master; p->fds[1] = -1;
    p->in_fd = dup(io->master);
    fcntl(p->in_fd, F_SETFD, FD_CLOEXEC);
  } else {
    close(io->out[1]); close(io->err[1]);
    p->fds[0] = io->out[0]; p->fds[1] = io->err[0];
    if (r->with_stdin) { close(io->in[0]); p->in_fd = io->in[1]; } else p->in_fd = -1;
  }
  for (int i = 0; i < 2; i++) if (p->fds[i] >= 0) set_nonblock(p->fds[i]);
  if (p->in_fd >= 0) set_nonblock(p->in_fd);
}

/* Forks and starts the command in record `slot`; answers SPAWNED or FAILED. */
static void start_command(int slot, uint32_t handle, spawn_req *r) {
  spawn_io io = { { -1, -1 }, { -1, -1 }, { -1, -1 }, -1, "" };
  const char *what = "";
  int e = open_io(&io, r, &what);
  if (e) { send_text(A_FAILED, handle, "%d%c%s: %s", e, 0, what, strerror(e)); return; }
  int report[2] = { -1, -1 };
  if (pipe2(report, O_CLOEXEC) < 0) report[0] = report[1] = -1;
  pid_t pid = fork();
  if (pid == 0) exec_child(r, &io, report[1]);
  e = errno;
  if (report[1] >= 0) close(report[1]);
  char why[1024];
  size_t got = pid > 0 && report[0] >= 0 ? start_report(report[0], why, sizeof why) : 0;
  if (report[0] >= 0) close(report[0]);
  if (got > 0) {
    waitpid(pid, NULL, 0);
    close_io(&io);
    send_ctl(A_FAILED, handle, why, (uint32_t)got);
  } else if (pid < 0) {
    close_io(&io);
    send_text(A_FAILED, handle, "%d%cfork: %s", e, 0, strerror(e));
  } else {
    install_proc(slot, handle, pid, r, &io);
    send_text(A_SPAWNED, handle, "%d", (int)pid);
  }
}

static void do_spawn(uint32_t handle, unsigned char *payload, uint32_t len) {
  if (find(handle)) { send_text(A_FAILED, handle, "EEXIST%chandle already in use", 0); return; }
  spawn_req r = { 0 };
  char why[128];
  int slot;
  if (parse_spawn(&r, payload, len, why, sizeof why) < 0) send_text(A_FAILED, handle, "EINVAL%c%s", 0, why);
  else if ((slot = free_slot()) < 0) send_text(A_FAILED, handle, "EAGAIN%ctoo many processes in the agent", 0);
  else start_command(slot, handle, &r);
  free(r.argv);
  free(r.envp);
}
