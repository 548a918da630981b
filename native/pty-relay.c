/*
 * pty-relay: runs one command on a new pseudo-terminal and relays it over plain descriptors.
 *
 *   pty-relay [--exec-report] [--no-pin] COLS ROWS FILE [ARG...]
 *   pty-relay [--exec-report] --pipe [--arg0 NAME] FILE [ARG...]
 *
 *   --exec-report: FILE is a launcher (build/sandbox-join) that starts the real program itself.
 *         It gets a pipe named by EXEC_SERVER_EXEC_REPORT_FD and writes one int there before its
 *         own exec: 0, or the errno that exec would fail with (no such program, not executable),
 *         which the relay reports as "error ERRNO TEXT" like its own exec failing.
 *
 *   fd 0  bytes for the terminal (the command's keyboard)
 *   fd 1  everything the command writes to the terminal
 *   fd 3  control, both ways. In: "resize COLS ROWS\n". Out: "pid N\n" once the
 *         command runs (or "error ERRNO TEXT\n" when it could not be started), then "exit CODE\n"
 *         or "signal SIGNO\n" when it has been reaped. fd 1 is closed once the terminal is drained.
 *
 * Keeper: the relay is a child subreaper, so whatever the command leaves running in the
 * background (`server &`, a daemon that forked twice and called setsid) is handed to the relay
 * when its parent ends. The relay stays while such processes live, until the server sends it
 * SIGTERM or closes fd 3, and then kills every process below it with SIGKILL, in passes until
 * none is left (a process forked meanwhile is caught by the next pass). fd 3 also closes when
 * the server dies, even by SIGKILL: nothing the command started outlives the server. Processes
 * that left through a sandbox's PID namespace are that sandbox's, not the relay's
 * (native/sandbox-join.c).
 *
 * `--pipe` is the keeper, for pipe-mode commands: the command runs in a session of its own on
 * pipes the relay moves to and from its own fd 0-2 (stdio-pipes.h: a command must be able to
 * open /dev/stdout, which a socket refuses), and fd 3 speaks as above.
 *
 * Why a helper instead of reading the terminal in Node: the kernel hands out at most 4 KiB per
 * read of a terminal, so at 100 MB/s a Node reader takes 25,000 callbacks a second, and while it
 * encodes and sends one chunk the terminal fills and the command waits. This loop reads the
 * terminal as fast as it fills, into a buffer, and the server reads that buffer through a socket
 * in chunks of up to 64 KiB: fewer events, fewer frames, and the command keeps running while the
 * server works. It also owns the end of the output: the terminal counts as drained when the master
 * reads EIO (every holder of the slave is gone; the kernel hands out what was written first), or,
 * when a background process keeps the terminal open after the command exited, once output has been
 * quiet for QUIET_US or MAX_DRAIN_US have passed.
 *
 * Backpressure: when the server stops reading fd 1, the buffer fills, the loop stops reading the
 * terminal, and the command blocks on its writes, as it would on a real terminal.
 *
 * Co-location: while output streams fast (FAST_BYTES within FAST_US), the terminal's foreground
 * process group and this relay are pinned to the CPU the relay runs on, and given back the
 * relay's own CPU set once output has been quiet for UNPIN_QUIET_US (or the relay ends). A
 * terminal moves 4 KiB per round of writer -> kernel worker -> reader; with the writer and the
 * reader on different CPUs every round costs cross-CPU wake-ups, which on a virtual machine are
 * exits to the hypervisor. Pinned, a 256 MB PTY stream ran at 114-121 MB/s against 90-101
 * unpinned, the reference 94-102 (bench/compare-reference.ts, docs/benchmarks.md). A program
 * that writes to its terminal that fast is a dump (cat, head, a log); one that only prints a
 * little keeps all its CPUs. `--no-pin` turns this off (the server's --pty-no-pin).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cloexec.h"

#define CTL_FD 3
#define OUT_CAP (256 * 1024)
#define IN_CAP (64 * 1024)
/* After the command exited, a terminal still held open counts as drained after this quiet time. */
#define QUIET_US 200000
#define MAX_DRAIN_US 5000000
/*
 * Pacing, measured with bench/compare-reference.ts (docs/benchmarks.md): the terminal is read
 * once per wakeup (it hands out at most 4 KiB per read) and what was read is handed on at once.
 * Reading in long bursts (up to 256 KiB) or holding output back until 8 or 32 KiB had gathered
 * made the command and the server wait on each other (median PTY stream 0.90x of the reference
 * with 8 KiB hand-offs, about 1.0x without). While output is streaming (data within
 * STREAMING_US), the loop polls without sleeping for up to SPIN_US before it blocks, yielding
 * the CPU to whatever else is runnable on it: on a virtual machine, waking a halted CPU for each
 * 4 KiB the terminal delivers costs more than the spin (0.84x without it). The spin stops with
 * the output: an idle terminal costs nothing.
 */
#define STREAMING_US 1000
#define SPIN_US 1000

#define FAST_BYTES (1024 * 1024)
#define FAST_US 20000
#define UNPIN_QUIET_US 100000

static char out[OUT_CAP];
static size_t out_off, out_end;
static char in[IN_CAP];
static size_t in_off, in_end;

static void die(const char *what) {
  fprintf(stderr, "pty-relay: %s: %s\n", what, strerror(errno));
  exit(2);
}

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int parse_dim(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  return (*s && !*end && v >= 1 && v <= 65535) ? (int)v : -1;
}

static void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) die("fcntl");
}

/* Control lines to the server are tiny; a full socket here means the server is gone. */
static void ctl_say(const char *fmt, long a, const char *text) {
  char line[256];
  int n = text ? snprintf(line, sizeof line, fmt, a, text) : snprintf(line, sizeof line, fmt, a);
  if (n > 0) (void)!write(CTL_FD, line, (size_t)n);
}

/* The settings node-pty and most terminal emulators start with: cooked, echo, UTF-8 aware. */
static void init_termios(int slave, int cols, int rows) {
  struct termios t;
  if (tcgetattr(slave, &t) < 0) die("tcgetattr");
  t.c_iflag = ICRNL | IXON | IXANY | IMAXBEL | BRKINT | IUTF8;
  t.c_oflag = OPOST | ONLCR;
  t.c_cflag = CREAD | CS8 | HUPCL;
  t.c_lflag = ICANON | ISIG | IEXTEN | ECHO | ECHOE | ECHOK | ECHOKE | ECHOCTL;
  cfsetispeed(&t, B38400);
  cfsetospeed(&t, B38400);
  if (tcsetattr(slave, TCSANOW, &t) < 0) die("tcsetattr");
  struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
  if (ioctl(slave, TIOCSWINSZ, &ws) < 0) die("TIOCSWINSZ");
}

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

/* One pass over /proc: SIGKILL to every process below `root`; how many were found. A process
 * with a fatal signal pending cannot fork any more, so a pass leaves only children forked while
 * it ran. */
static int kill_tree_pass(pid_t root) {
  size_t cap = 1024, n = 0;
  pid_t *pids = malloc(cap * sizeof *pids), *ppids = malloc(cap * sizeof *ppids);
  if (!pids || !ppids) {
    free(pids);
    free(ppids);
    return 0;
  }
  DIR *proc = opendir("/proc");
  struct dirent *d;
  while (proc && (d = readdir(proc)) != NULL) {
    pid_t p = (pid_t)atoi(d->d_name);
    if (p <= 0) continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = '\0';
    char *paren = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    int ppid;
    char state;
    if (!paren || sscanf(paren + 1, " %c %d", &state, &ppid) != 2) continue;
    if (state == 'Z') ppid = -1; /* ended already: nothing to kill, its children are handed on */
    if (n == cap) {
      cap *= 2;
      pid_t *a = realloc(pids, cap * sizeof *pids), *b = a ? realloc(ppids, cap * sizeof *ppids) : NULL;
      if (a) pids = a;
      if (!a || !b) break;
      ppids = b;
    }
    pids[n] = p;
    ppids[n++] = (pid_t)ppid;
  }
  if (proc) closedir(proc);
  /* Mark descendants until nothing changes; `mark` holds 1 for processes below root. */
  char *mark = calloc(n ? n : 1, 1);
  int found = 0, changed = 1;
  while (mark && changed) {
    changed = 0;
    for (size_t i = 0; i < n; i++) {
      if (mark[i]) continue;
      int below = ppids[i] == root;
      for (size_t j = 0; !below && j < n; j++) below = mark[j] && pids[j] == ppids[i];
      if (below) {
        mark[i] = 1;
        changed = 1;
        kill(pids[i], SIGKILL);
        found++;
      }
    }
  }
  free(mark);
  free(pids);
  free(ppids);
  return found;
}

/* Whether any child (the command, or a leftover handed to us) is still there, exited or not. */
static int have_children(void) {
  siginfo_t info;
  memset(&info, 0, sizeof info);
  return waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

/* Reaps what has ended, reporting the command's own end once; how many were reaped. */
static int reap(pid_t cmd, int *reaped, long long *exited_at) {
  int status, count = 0;
  pid_t w;
  while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
    count++;
    if (w != cmd || *reaped) continue;
    *reaped = 1;
    if (exited_at) *exited_at = now_us();
    if (WIFSIGNALED(status)) ctl_say("signal %ld\n", WTERMSIG(status), NULL);
    else ctl_say("exit %ld\n", WEXITSTATUS(status), NULL);
  }
  return count;
}

/* Kills everything below the relay and reaps it (the command's end is reported as usual). */
static void kill_tree(pid_t cmd, int *reaped, long long *exited_at) {
  pid_t self = getpid();
  for (int quiet = 0; quiet < 3;) {
    int found = kill_tree_pass(self);
    int ended = reap(cmd, reaped, exited_at);
    if (found || ended) quiet = 0;
    else if (!have_children()) quiet++;
    else usleep(1000);
  }
}

/* Reads control lines; returns -1 when the server is gone (EOF, error), else 0. */
static int read_ctl(int master, char *ctl, size_t *ctl_len, size_t size) {
  ssize_t n = read(CTL_FD, ctl + *ctl_len, size - 1 - *ctl_len);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return -1;
  if (n < 0) return 0;
  *ctl_len += (size_t)n;
  char *nl;
  while ((nl = memchr(ctl, '\n', *ctl_len)) != NULL) {
    *nl = '\0';
    int cols, rows;
    if (master >= 0 && sscanf(ctl, "resize %d %d", &cols, &rows) == 2 && cols >= 1 && rows >= 1 && cols <= 65535 && rows <= 65535) {
      struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
      (void)ioctl(master, TIOCSWINSZ, &ws);
    }
    size_t used = (size_t)(nl + 1 - ctl);
    memmove(ctl, nl + 1, *ctl_len - used);
    *ctl_len -= used;
  }
  if (*ctl_len == size - 1) *ctl_len = 0; /* an overlong line: not ours, drop it */
  return 0;
}

/* Drains the signalfd; whether SIGTERM (the server's "end everything") was among its signals.
 * A signal rather than a control line: the relay may be exiting when it is asked, and a
 * write to its closing socket would cost the server the lines still unread on it. */
static int drain_signals(int sigfd) {
  struct signalfd_siginfo si;
  int term = 0;
  while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
    if (si.ssi_signo == SIGTERM) term = 1;
  }
  return term;
}

#include "stdio-pipes.h"

#define DRAIN_AFTER_END_US 500000

/* After the command: holds what it left behind until the server ends it or it ends by itself,
 * moving a pipe-mode command's stdio meanwhile (stdio-pipes.h) until its output is delivered. */
static int keep_leftovers(int sigfd, int reaped, pid_t cmd) {
  char ctl[128];
  size_t ctl_len = 0;
  long long ended_at = 0;
  for (;;) {
    reap(cmd, &reaped, NULL);
    if (reaped && !have_children()) {
      stdio_pipe_end(&stdio_pipes[0]); /* nobody is left to read stdin */
      if (!stdio_pipes_busy()) return 0;
    }
    /* Ended by the server: what is already in the pipes still goes, for a moment at most. */
    if (ended_at && now_us() - ended_at > DRAIN_AFTER_END_US) return 0;
    struct pollfd p[5] = {{.fd = CTL_FD, .events = ended_at ? 0 : POLLIN}, {.fd = sigfd, .events = POLLIN}};
    int n = 2 + stdio_pipes_poll(p + 2);
    if (poll(p, (nfds_t)n, ended_at ? 50 : -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    for (int k = 0; k < 3; k++) stdio_pipe_pump(&stdio_pipes[k]);
    if (ended_at) continue;
    int end = (p[1].revents & POLLIN) && drain_signals(sigfd);
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_ctl(-1, ctl, &ctl_len, sizeof ctl) != 0) end = 1;
    if (end) {
      kill_tree(cmd, &reaped, NULL);
      ended_at = now_us();
    }
  }
}

/* --exec-report (see the top): the pipe the launcher reports on, made before the fork. */
static int exec_report = 0;
static int report_pipe[2] = {-1, -1};

static void report_prepare(void) {
  if (exec_report && pipe2(report_pipe, O_CLOEXEC) < 0) die("pipe2");
}

/* In the child, before its exec: the launcher inherits the write end and learns its number. */
static void report_pass(void) {
  if (report_pipe[1] < 0) return;
  char num[16];
  snprintf(num, sizeof num, "%d", report_pipe[1]);
  if (fcntl(report_pipe[1], F_SETFD, 0) < 0 || setenv("EXEC_SERVER_EXEC_REPORT_FD", num, 1) < 0) return;
}

/* In the relay, once the launcher runs: the errno it reported (0: the program is being run, or
 * the launcher ended without a word, which its exit then tells). */
static int report_wait(void) {
  if (report_pipe[0] < 0) return 0;
  int e = 0;
  size_t got = 0;
  while (got < sizeof e) {
    ssize_t n = read(report_pipe[0], (char *)&e + got, sizeof e - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(report_pipe[0]);
  return got == sizeof e ? e : 0;
}

/* After the fork, in the relay: only the child holds the write end. */
static void report_close_writer(void) {
  if (report_pipe[1] >= 0) close(report_pipe[1]);
  report_pipe[1] = -1;
}

/* In the command's process after the fork: the relay's signal mask undone, fds from 3 closed at
 * exec (the report pipe's end is made inheritable again by report_pass). */
static void child_prepare(const sigset_t *old) {
  sigprocmask(SIG_SETMASK, old, NULL);
  signal(SIGPIPE, SIG_DFL);
  cloexec_from(3);
  report_pass();
}

/* Forks the command's process (prepared by child_prepare) with the pipe its exec errno comes
 * back through; 0 in the child, its pid in the relay. */
static pid_t fork_command(int errpipe[2], const sigset_t *old) {
  if (pipe2(errpipe, O_CLOEXEC) < 0) die("pipe2");
  report_prepare();
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) child_prepare(old);
  return pid;
}

/* In the command's process: its start failed; the errno goes to the relay through `fd`. */
__attribute__((noreturn)) static void child_failed(int fd) {
  int e = errno;
  (void)!write(fd, &e, sizeof e);
  _exit(127);
}

/* In the relay after the fork: whether the command started (its errno pipe closed empty, and
 * the launcher, with --exec-report, reported 0). Says "pid N" or "error ERRNO TEXT" on fd 3. */
static int exec_started(int errpipe[2], pid_t pid) {
  close(errpipe[1]);
  report_close_writer();
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(errpipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {}
  close(errpipe[0]);
  if (n <= 0 && (exec_errno = report_wait()) != 0) n = 1;
  if (n > 0) {
    waitpid(pid, NULL, 0);
    ctl_say("error %ld %s\n", exec_errno, strerror(exec_errno));
    return 0;
  }
  ctl_say("pid %ld\n", pid, NULL);
  return 1;
}

/* Pipe mode: the command runs on the relay's own fd 0-2; the relay only keeps it. */
static int run_pipe(char **cmd, int sigfd, const sigset_t *old) {
  const char *file = cmd[0];
  if (strcmp(cmd[0], "--arg0") == 0 && cmd[1] && cmd[2]) { /* --arg0 NAME FILE ARG...: NAME as argv[0] */
    file = cmd[2];
    cmd[2] = cmd[1];
    cmd += 2;
  }
  stdio_pipes_make();
  int errpipe[2];
  pid_t pid = fork_command(errpipe, old);
  if (pid == 0) {
    stdio_pipes_child();
    if (setsid() >= 0) execvp(file, cmd);
    child_failed(errpipe[1]);
  }
  stdio_pipes_parent();
  if (!exec_started(errpipe, pid)) return 0;
  set_nonblock(CTL_FD);
  return keep_leftovers(sigfd, 0, pid);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--exec-report") == 0) {
    exec_report = 1;
    argv++;
    argc--;
  }
  int pipe_mode = argc > 2 && strcmp(argv[1], "--pipe") == 0;
  if (argc > 1 && strcmp(argv[1], "--no-pin") == 0) {
    no_pin = 1;
    argv++;
    argc--;
  }
  if (argc < 4 && !pipe_mode) {
    fprintf(stderr, "usage: pty-relay [--no-pin] COLS ROWS FILE [ARG...]\n       pty-relay --pipe [--arg0 NAME] FILE [ARG...]\n");
    return 2;
  }
  int cols = pipe_mode ? 80 : parse_dim(argv[1]), rows = pipe_mode ? 24 : parse_dim(argv[2]);
  if (cols < 0 || rows < 0) {
    fprintf(stderr, "pty-relay: bad size %s x %s\n", argv[1], argv[2]);
    return 2;
  }
  struct stat st;
  if (fstat(CTL_FD, &st) < 0) die("control descriptor 3");
  if (fcntl(CTL_FD, F_SETFD, FD_CLOEXEC) < 0) die("fcntl");
  signal(SIGPIPE, SIG_IGN);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) die("PR_SET_CHILD_SUBREAPER");

  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigaddset(&chld, SIGTERM);
  if (sigprocmask(SIG_BLOCK, &chld, &old) < 0) die("sigprocmask");
  int sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) die("signalfd");
  if (pipe_mode) return run_pipe(argv + 2, sigfd, &old);

  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) die("posix_openpt");
  if (grantpt(master) < 0 || unlockpt(master) < 0) die("unlockpt");
  char name[128];
  if (ptsname_r(master, name, sizeof name) != 0) die("ptsname");
  int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) die("open slave");
  init_termios(slave, cols, rows);

  int errpipe[2];
  pid_t pid = fork_command(errpipe, &old);
  if (pid == 0) {
    if (setsid() < 0 || ioctl(slave, TIOCSCTTY, 0) < 0 || dup2(slave, 0) < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0) {
      child_failed(errpipe[1]);
    }
    execvp(argv[3], argv + 3);
    child_failed(errpipe[1]);
  }
  /* Only the command holds the slave from here on, so EIO on the master means it is all read. */
  close(slave);
  if (!exec_started(errpipe, pid)) return 0;
  ssize_t n;

  set_nonblock(master);
  set_nonblock(0);
  set_nonblock(1);
  set_nonblock(CTL_FD);

  char ctl[128];
  size_t ctl_len = 0;
  int master_done = 0, out_dead = 0, in_eof = 0, reaped = 0;
  long long exited_at = 0, last_data = now_us();
  long long fast_since = 0, fast_bytes = 0;
  /* With one CPU (or an unknown set) there is nothing to gather on. */
  if (sched_getaffinity(0, sizeof own_cpus, &own_cpus) < 0 || CPU_COUNT(&own_cpus) < 2) no_pin = 1;

  for (;;) {
    if (out_dead) out_off = out_end = 0;
    if (reaped && master_done && out_off == out_end) break;
    int room = out_end < OUT_CAP || out_off > 0;
    int in_pending = in_off < in_end;
    short mev = (short)((!master_done && room ? POLLIN : 0) | (!master_done && in_pending ? POLLOUT : 0));
    struct pollfd p[5] = {
        {.fd = mev ? master : -1, .events = mev},
        {.fd = out_off < out_end ? 1 : -1, .events = POLLOUT},
        {.fd = !in_eof && !in_pending ? 0 : -1, .events = POLLIN},
        {.fd = CTL_FD, .events = POLLIN},
        {.fd = sigfd, .events = POLLIN},
    };
    long long t = now_us(), deadline = -1;
    if (reaped && !master_done) {
      /* Quiet time counts only while we are reading: a full buffer is the server's pause. */
      deadline = exited_at + MAX_DRAIN_US;
      if (room && last_data + QUIET_US < deadline) deadline = last_data + QUIET_US;
      if (deadline <= t) {
        master_done = 1;
        continue;
      }
    }
    if (pinned) {
      long long unpin_at = last_data + UNPIN_QUIET_US;
      if (unpin_at <= t) {
        unpin(pid);
        continue;
      }
      if (deadline < 0 || unpin_at < deadline) deadline = unpin_at;
    }
    struct timespec ts, *tsp = NULL;
    if (deadline >= 0) {
      ts.tv_sec = (deadline - t) / 1000000;
      ts.tv_nsec = ((deadline - t) % 1000000) * 1000;
      tsp = &ts;
    }
    int ready = 0;
    if (p[0].fd >= 0 && t - last_data < STREAMING_US) {
      struct timespec zero = {0, 0};
      while ((ready = ppoll(p, 5, &zero, NULL)) == 0 && now_us() - t < SPIN_US) sched_yield();
    }
    if (!ready && ppoll(p, 5, tsp, NULL) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }

    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (room) {
        if (out_end == OUT_CAP) {
          memmove(out, out + out_off, out_end - out_off);
          out_end -= out_off;
          out_off = 0;
        }
        n = read(master, out + out_end, OUT_CAP - out_end);
        if (n > 0) {
          out_end += (size_t)n;
          last_data = now_us();
          if (last_data - fast_since > FAST_US) fast_since = last_data, fast_bytes = 0;
          fast_bytes += n;
          if (fast_bytes >= FAST_BYTES) pin(master);
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          master_done = 1; /* EIO: every holder of the terminal is gone and it is drained */
        }
      } else if (p[0].revents & (POLLHUP | POLLERR)) {
        in_off = in_end = 0; /* nobody is left to read keystrokes */
      }
    }
    if (in_off < in_end && !master_done && (p[0].revents & POLLOUT)) {
      n = write(master, in + in_off, in_end - in_off);
      if (n > 0) in_off += (size_t)n;
      else if (n < 0 && errno != EAGAIN && errno != EINTR) in_off = in_end;
    }
    if (in_off == in_end) in_off = in_end = 0;

    if (out_off < out_end) {
      n = write(1, out + out_off, out_end - out_off);
      if (n > 0) out_off += (size_t)n;
      else if (n < 0 && errno != EAGAIN && errno != EINTR) out_dead = 1;
      if (out_off == out_end) out_off = out_end = 0;
    }

    if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
      n = read(0, in, IN_CAP);
      if (n > 0) {
        in_off = 0;
        in_end = (size_t)n;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        in_eof = 1;
      }
    }

    if (p[3].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (read_ctl(master, ctl, &ctl_len, sizeof ctl) < 0) {
        /* The server is gone: hang up the terminal, end everything the command started, leave. */
        unpin(pid);
        close(master);
        kill_tree(pid, &reaped, &exited_at);
        return 1;
      }
    }

    if (p[4].revents & POLLIN) {
      /* The command is reaped and reported as killed; the terminal drains as usual. */
      if (drain_signals(sigfd)) kill_tree(pid, &reaped, &exited_at);
      /* The SIGCHLD may be a leftover's (handed to us): reap whatever has ended. */
      reap(pid, &reaped, &exited_at);
    }
  }
  unpin(pid); /* background holders of the terminal keep running, with their CPUs */
  close(1);
  close(master); /* a hangup, as when a terminal closes: jobs that ignore it live on, kept here */
  return keep_leftovers(sigfd, reaped, pid);
}
