/*
 * Pipes for a pipe-mode command's stdio, included by pty-relay.c (its --pipe mode).
 *
 * The relay's own fd 0-2 are sockets (the server's output channels, or Node's socketpairs), and
 * a command that got them as they are could not open /dev/stdout, /dev/stderr or /dev/stdin:
 * Linux refuses open(2) of a socket through /proc/self/fd with ENXIO, so `echo x > /dev/stderr`
 * failed where every terminal, `docker exec` and the docker backend's agent give pipes. So each
 * socket among fd 0-2 becomes a pipe for the command, and the relay moves the bytes between the
 * two with splice(2) (no copy through user space); a descriptor that is not a socket (/dev/null)
 * is passed on as it is. fd 2 that is the same socket as fd 1 gets the same pipe.
 *
 * Ends: the relay closes its side of an output socket once the pipe reports end-of-file (every
 * writer, the command and whatever it left running, closed it), and the stdin pipe once the
 * server ends stdin or the command closes its end. Backpressure is the pipes' and the sockets'
 * own: a server that stops reading fills the socket, then the pipe, and the command blocks.
 */
#include <sys/socket.h>

#define STDIO_PIPE_CAP 65536

typedef struct {
  int src, dst;   /* bytes flow src -> dst; -1 once done */
  int child_end;  /* the pipe end the command gets as its fd (-1 after the fork) */
  int same_as;    /* fd 2 sharing fd 1's socket: the index it shares, else -1 */
  int done;
  int full;       /* the last move stopped at a full destination: wait for it, not the source */
} stdio_pipe;

#define STDIO_PIPE_NONE {.src = -1, .dst = -1, .child_end = -1, .same_as = -1, .done = 1}
/* None until stdio_pipes_make (PTY mode never makes them). */
static stdio_pipe stdio_pipes[3] = {STDIO_PIPE_NONE, STDIO_PIPE_NONE, STDIO_PIPE_NONE};

/*
 * A pipe is made 0600 for its maker (root), and opening /dev/stdout goes through the pipe's own
 * mode: a sandboxed command running as another user got EACCES. Only processes allowed into
 * /proc/PID/fd of a holder can reach the pipe by name at all, so the mode opens nothing more.
 */
static void stdio_pipe_open_to_all(const int fds[2]) {
  for (int i = 0; i < 2; i++) (void)fchmod(fds[i], 0666);
}

static int is_socket(int fd, struct stat *st) { return fstat(fd, st) == 0 && S_ISSOCK(st->st_mode); }

/* Before the fork: a pipe for each socket among fd 0-2 (see the top). */
static void stdio_pipes_make(void) {
  struct stat st[3];
  for (int k = 0; k < 3; k++) {
    stdio_pipe *p = &stdio_pipes[k];
    *p = (stdio_pipe)STDIO_PIPE_NONE;
    if (!is_socket(k, &st[k])) continue;
    if (k == 2 && stdio_pipes[1].child_end >= 0 && st[2].st_ino == st[1].st_ino && st[2].st_dev == st[1].st_dev) {
      p->same_as = 1;
      continue;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) die("pipe2");
    stdio_pipe_open_to_all(fds);
    p->done = 0;
    if (k == 0) { p->src = 0; p->dst = fds[1]; p->child_end = fds[0]; }
    else { p->src = fds[0]; p->dst = k; p->child_end = fds[1]; }
    set_nonblock(k == 0 ? fds[1] : fds[0]);
  }
}

/* In the command's process: its fd 0-2 become the pipes' ends (dup2 clears close-on-exec). */
static void stdio_pipes_child(void) {
  for (int k = 0; k < 3; k++) {
    stdio_pipe *p = &stdio_pipes[k];
    int end = p->same_as >= 0 ? stdio_pipes[p->same_as].child_end : p->child_end;
    if (end >= 0 && dup2(end, k) < 0) _exit(127);
  }
}

/* In the relay after the fork: the command's ends are its alone; the relay's sockets wait
 * without blocking. fd 0-2 that stay the command's own (not sockets) go to /dev/null here. */
static void stdio_pipes_parent(void) {
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int k = 0; k < 3; k++) {
    stdio_pipe *p = &stdio_pipes[k];
    if (p->child_end >= 0) close(p->child_end);
    p->child_end = -1;
    if (!p->done) set_nonblock(k);
    else if (devnull >= 0) dup2(devnull, k); /* fd 2 sharing fd 1's socket too: fd 1 holds it */
  }
  if (devnull > 2) close(devnull);
}

static void stdio_pipe_end(stdio_pipe *p) {
  if (p->done) return;
  /* Closing fd 0-2 would let the next open(2) take the number: /dev/null stands in. */
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int i = 0; i < 2; i++) {
    int fd = i == 0 ? p->src : p->dst;
    if (fd > 2) close(fd);
    else if (fd >= 0 && devnull >= 0) dup2(devnull, fd);
  }
  if (devnull > 2) close(devnull);
  p->src = p->dst = -1;
  p->done = 1;
}

/* Moves what it can of one pipe; ends it at end-of-file or when its reader is gone. */
static void stdio_pipe_pump(stdio_pipe *p) {
  while (!p->done) {
    ssize_t n = splice(p->src, NULL, p->dst, NULL, STDIO_PIPE_CAP, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      /* splice says EAGAIN for an empty source and a full destination alike: ask the source. */
      struct pollfd q = {.fd = p->src, .events = POLLIN};
      p->full = poll(&q, 1, 0) == 1 && (q.revents & POLLIN);
      return;
    }
    stdio_pipe_end(p); /* 0: end-of-file; EPIPE, ECONNRESET...: nobody reads any more */
  }
}

/* The poll entry of each pipe still moving bytes (at most 3); how many were added. */
static int stdio_pipes_poll(struct pollfd *pf) {
  int n = 0;
  for (int k = 0; k < 3; k++) {
    stdio_pipe *p = &stdio_pipes[k];
    if (p->done) continue;
    pf[n++] = p->full ? (struct pollfd){.fd = p->dst, .events = POLLOUT} : (struct pollfd){.fd = p->src, .events = POLLIN};
  }
  return n;
}

/* Output still on its way to the server (stdin does not count: nobody may read it any more). */
static int stdio_pipes_busy(void) { return !stdio_pipes[1].done || !stdio_pipes[2].done; }
