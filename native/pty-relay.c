/*
 * pty-relay: runs one command on a new pseudo-terminal and relays it over plain descriptors.
 *
 *   pty-relay [--no-pin] COLS ROWS FILE [ARG...]
 *
 *   fd 0  bytes for the terminal (the command's keyboard)
 *   fd 1  everything the command writes to the terminal
 *   fd 3  control, both ways. In: "resize COLS ROWS\n". Out: "pid N\n" once the command runs
 *         (or "error ERRNO TEXT\n" when it could not be started), then "exit CODE\n" or
 *         "signal SIGNO\n" when it has been reaped. fd 1 is closed once the terminal is drained.
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
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

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

static void handle_ctl_line(int master, char *line) {
  int cols, rows;
  if (sscanf(line, "resize %d %d", &cols, &rows) == 2 && cols >= 1 && rows >= 1 && cols <= 65535 && rows <= 65535) {
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    (void)ioctl(master, TIOCSWINSZ, &ws);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--no-pin") == 0) {
    no_pin = 1;
    argv++;
    argc--;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: pty-relay [--no-pin] COLS ROWS FILE [ARG...]\n");
    return 2;
  }
  int cols = parse_dim(argv[1]), rows = parse_dim(argv[2]);
  if (cols < 0 || rows < 0) {
    fprintf(stderr, "pty-relay: bad size %s x %s\n", argv[1], argv[2]);
    return 2;
  }
  struct stat st;
  if (fstat(CTL_FD, &st) < 0) die("control descriptor 3");
  if (fcntl(CTL_FD, F_SETFD, FD_CLOEXEC) < 0) die("fcntl");
  signal(SIGPIPE, SIG_IGN);

  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) die("posix_openpt");
  if (grantpt(master) < 0 || unlockpt(master) < 0) die("unlockpt");
  char name[128];
  if (ptsname_r(master, name, sizeof name) != 0) die("ptsname");
  int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) die("open slave");
  init_termios(slave, cols, rows);

  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &chld, &old) < 0) die("sigprocmask");
  int sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) die("signalfd");
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) < 0) die("pipe2");

  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (setsid() < 0 || ioctl(slave, TIOCSCTTY, 0) < 0 || dup2(slave, 0) < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0) {
      int e = errno;
      (void)!write(errpipe[1], &e, sizeof e);
      _exit(127);
    }
    execvp(argv[3], argv + 3);
    int e = errno;
    (void)!write(errpipe[1], &e, sizeof e);
    _exit(127);
  }
  /* Only the command holds the slave from here on, so EIO on the master means it is all read. */
  close(slave);
  close(errpipe[1]);
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(errpipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {}
  close(errpipe[0]);
  if (n > 0) {
    waitpid(pid, NULL, 0);
    ctl_say("error %ld %s\n", exec_errno, strerror(exec_errno));
    return 0;
  }
  ctl_say("pid %ld\n", pid, NULL);

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
        {.fd = reaped ? -1 : sigfd, .events = POLLIN},
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
      n = read(CTL_FD, ctl + ctl_len, sizeof ctl - 1 - ctl_len);
      if (n > 0) {
        ctl_len += (size_t)n;
        char *nl;
        while ((nl = memchr(ctl, '\n', ctl_len)) != NULL) {
          *nl = '\0';
          handle_ctl_line(master, ctl);
          size_t used = (size_t)(nl + 1 - ctl);
          memmove(ctl, nl + 1, ctl_len - used);
          ctl_len -= used;
        }
        if (ctl_len == sizeof ctl - 1) ctl_len = 0; /* an overlong line: not ours, drop it */
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        /* The server is gone: hang up the terminal (the command gets SIGHUP) and leave. */
        unpin(pid);
        close(master);
        return 1;
      }
    }

    if (p[4].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sigfd, &si, sizeof si) > 0) {}
      int status;
      if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
        reaped = 1;
        exited_at = now_us();
        if (WIFSIGNALED(status)) ctl_say("signal %ld\n", WTERMSIG(status), NULL);
        else ctl_say("exit %ld\n", WEXITSTATUS(status), NULL);
      }
    }
  }
  unpin(pid); /* background holders of the terminal keep running, with their CPUs */
  close(1);
  close(master);
  return 0;
}
