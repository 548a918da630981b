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
 * little keeps all its CPUs. It changes the command's CPU affinity, so the server passes
 * `--no-pin` unless the operator turned it on (`--pty-pin`). The exec agent does the same for
 * the docker backend (pty-pin.h).
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

#include "pty-pin.h"
#include "pty-relay-keeper.h"
#include "pty-relay-start.h"

/* The terminal loop's state (PTY mode); the buffers are the file's `out` and `in`. */
typedef struct {
  int master, sigfd;
  pid_t pid;
  char ctl[128];
  size_t ctl_len;
  int master_done, out_dead, in_eof, reaped;
  long long exited_at, last_data;
  pin_pace pace;
} relay;

/*
 * The next time the loop must wake by itself (-1: none), or 0 when it acted instead (the
 * terminal counted as drained, or the command's CPUs given back): the caller loops again.
 */
static long long next_deadline(relay *r, long long t, int room) {
  long long deadline = -1;
  if (r->reaped && !r->master_done) {
    /* Quiet time counts only while we are reading: a full buffer is the server's pause. */
    deadline = r->exited_at + MAX_DRAIN_US;
    if (room && r->last_data + QUIET_US < deadline) deadline = r->last_data + QUIET_US;
    if (deadline <= t) {
      r->master_done = 1;
      return 0;
    }
  }
  if (pinned) {
    long long unpin_at = r->last_data + UNPIN_QUIET_US;
    if (unpin_at <= t) {
      unpin(r->pid);
      return 0;
    }
    if (deadline < 0 || unpin_at < deadline) deadline = unpin_at;
  }
  return deadline;
}

/* Waits for the descriptors (spinning first while output streams); -1 on EINTR. */
static int wait_ready(relay *r, struct pollfd p[5], long long t, long long deadline) {
  struct timespec ts, *tsp = NULL;
  if (deadline >= 0) {
    ts.tv_sec = (deadline - t) / 1000000;
    ts.tv_nsec = ((deadline - t) % 1000000) * 1000;
    tsp = &ts;
  }
  int ready = 0;
  if (p[0].fd >= 0 && t - r->last_data < STREAMING_US) {
    struct timespec zero = {0, 0};
    while ((ready = ppoll(p, 5, &zero, NULL)) == 0 && now_us() - t < SPIN_US) sched_yield();
  }
  if (!ready && ppoll(p, 5, tsp, NULL) < 0) {
    if (errno == EINTR) return -1;
    die("poll");
  }
  return ready;
}

/* The terminal is readable (or hung up): into the buffer while it has room. */
static void read_master(relay *r, short revents, int room) {
  if (!room) {
    if (revents & (POLLHUP | POLLERR)) in_off = in_end = 0; /* nobody is left to read keystrokes */
    return;
  }
  if (out_end == OUT_CAP) {
    memmove(out, out + out_off, out_end - out_off);
    out_end -= out_off;
    out_off = 0;
  }
  ssize_t n = read(r->master, out + out_end, OUT_CAP - out_end);
  if (n > 0) {
    out_end += (size_t)n;
    r->last_data = now_us();
    pin_when_fast(&r->pace, r->master, r->last_data, n);
  } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    r->master_done = 1; /* EIO: every holder of the terminal is gone and it is drained */
  }
}

/* Keystrokes to the terminal, output to the server, and the next keystrokes from fd 0. */
static void move_bytes(relay *r, short master_revents, short in_revents) {
  ssize_t n;
  if (in_off < in_end && !r->master_done && (master_revents & POLLOUT)) {
    n = write(r->master, in + in_off, in_end - in_off);
    if (n > 0) in_off += (size_t)n;
    else if (n < 0 && errno != EAGAIN && errno != EINTR) in_off = in_end;
  }
  if (in_off == in_end) in_off = in_end = 0;
  if (out_off < out_end) {
    n = write(1, out + out_off, out_end - out_off);
    if (n > 0) out_off += (size_t)n;
    else if (n < 0 && errno != EAGAIN && errno != EINTR) r->out_dead = 1;
    if (out_off == out_end) out_off = out_end = 0;
  }
  if (in_revents & (POLLIN | POLLHUP | POLLERR)) {
    n = read(0, in, IN_CAP);
    if (n > 0) {
      in_off = 0;
      in_end = (size_t)n;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      r->in_eof = 1;
    }
  }
}

/* Relays the terminal until the command is reaped and its output handed on; 1 when the server
 * went away (everything the command started is killed then). */
static int relay_terminal(relay *r) {
  for (;;) {
    if (r->out_dead) out_off = out_end = 0;
    if (r->reaped && r->master_done && out_off == out_end) return 0;
    int room = out_end < OUT_CAP || out_off > 0;
    int in_pending = in_off < in_end;
    short mev = (short)((!r->master_done && room ? POLLIN : 0) | (!r->master_done && in_pending ? POLLOUT : 0));
    struct pollfd p[5] = {
        {.fd = mev ? r->master : -1, .events = mev},
        {.fd = out_off < out_end ? 1 : -1, .events = POLLOUT},
        {.fd = !r->in_eof && !in_pending ? 0 : -1, .events = POLLIN},
        {.fd = CTL_FD, .events = POLLIN},
        {.fd = r->sigfd, .events = POLLIN},
    };
    long long t = now_us(), deadline = next_deadline(r, t, room);
    if (deadline == 0 || wait_ready(r, p, t, deadline) < 0) continue;
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) read_master(r, p[0].revents, room);
    move_bytes(r, p[0].revents, p[2].revents);
    if ((p[3].revents & (POLLIN | POLLHUP | POLLERR)) && read_ctl(r->master, r->ctl, &r->ctl_len, sizeof r->ctl) < 0) {
      /* The server is gone: hang up the terminal, end everything the command started, leave. */
      unpin(r->pid);
      close(r->master);
      kill_tree(r->pid, &r->reaped, &r->exited_at);
      return 1;
    }
    if (p[4].revents & POLLIN) {
      /* The command is reaped and reported as killed; the terminal drains as usual. */
      if (drain_signals(r->sigfd)) kill_tree(r->pid, &r->reaped, &r->exited_at);
      /* The SIGCHLD may be a leftover's (handed to us): reap whatever has ended. */
      reap(r->pid, &r->reaped, &r->exited_at);
    }
  }
}

/* PTY mode: the command on a new terminal, relayed until it ends, then kept (see the top). */
static int run_pty(char **cmd, int cols, int rows, int sigfd, const sigset_t *old) {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) die("posix_openpt");
  if (grantpt(master) < 0 || unlockpt(master) < 0) die("unlockpt");
  char name[128];
  if (ptsname_r(master, name, sizeof name) != 0) die("ptsname");
  int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) die("open slave");
  init_termios(slave, cols, rows);
  int errpipe[2];
  pid_t pid = fork_command(errpipe, old);
  if (pid == 0) {
    if (setsid() < 0 || ioctl(slave, TIOCSCTTY, 0) < 0 || dup2(slave, 0) < 0 || dup2(slave, 1) < 0 || dup2(slave, 2) < 0) {
      child_failed(errpipe[1]);
    }
    execvp(cmd[0], cmd);
    child_failed(errpipe[1]);
  }
  /* Only the command holds the slave from here on, so EIO on the master means it is all read. */
  close(slave);
  if (!exec_started(errpipe, pid)) return 0;
  set_nonblock(master);
  set_nonblock(0);
  set_nonblock(1);
  set_nonblock(CTL_FD);
  if (!pin_init()) no_pin = 1;
  relay r = {.master = master, .sigfd = sigfd, .pid = pid, .last_data = now_us()};
  if (relay_terminal(&r)) return 1;
  unpin(pid); /* background holders of the terminal keep running, with their CPUs */
  close(1);
  close(master); /* a hangup, as when a terminal closes: jobs that ignore it live on, kept here */
  return keep_leftovers(sigfd, r.reaped, pid);
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
  return run_pty(argv + 3, cols, rows, sigfd, &old);
}
