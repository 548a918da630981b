/*
 * exec-agent: the docker backend's supervisor inside a session container (docs/docker-backend.md,
 * "The exec agent"). Statically linked so it runs in any Linux image of the server's
 * architecture: it needs neither /bin/sh nor a libc there.
 *
 *   exec-agent attach SOCKET   run as a docker exec by the server: connects to the daemon on
 *                              SOCKET (starting it first when none answers), hands it this
 *                              exec's stdin and stdout (SCM_RIGHTS) and waits until the daemon
 *                              lets the connection go. The daemon then speaks the protocol on the
 *                              exec stream itself, so output crosses no extra process.
 *   exec-agent start SOCKET LINK
 *                              starts the daemon on SOCKET when none answers, hands it LINK
 *                              and the link secret (64 hex digits read from stdin), then exits.
 *                              LINK is a socket the server listens on, in a directory of the
 *                              server's mounted read-only into the container: the daemon
 *                              connects OUT to it (again after every break, retrying while
 *                              nobody listens, so a restarted server is found again), sends the
 *                              link greeting (magic and secret) and then speaks the protocol
 *                              on that connection; output crosses neither the engine nor its
 *                              shim. The server never opens a path inside the container.
 *   exec-agent tunnel SOCKET ID
 *                              run by the server as a command of the agent: relays the egress
 *                              client the daemon announced as ID (exec-agent-egress.c).
 *   exec-agent relayd          run once by the server on its own host: relays the egress
 *                              connections the server sends it over its IPC channel (each an
 *                              egress tunnel, or the client's socket taken from its agent, and
 *                              the destination), reporting the bytes of each (exec-agent-relay.c).
 *   exec-agent egress-wrap PORT LINK -- CMD...
 *                              the local backend: CMD with the session's proxy on 127.0.0.1:PORT.
 *   exec-agent version         prints the protocol version.
 *
 * The daemon runs the session's commands and outlives every connection: when the server goes
 * away (the exec's stdin reaches EOF) or asks to detach (hibernation), running commands go on
 * and the newest output of each (the retention budget) is kept for the next connection. A new
 * attach replaces the old connection. Every buffer is bounded; a malformed frame is answered
 * with an ERROR frame (and the connection is dropped when the framing itself is broken),
 * never with a crash.
 *
 * Frames (both directions): u32 payload length, u8 type, u8 stream, u16 zero, u32 handle,
 * little-endian, then the payload. The types and payloads are documented next to their
 * TypeScript twin in src/backends/docker/agent/agent-protocol.ts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <sched.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#define PROTOCOL_VERSION 1
#define HDR 12
#define MAX_PAYLOAD (1024 * 1024 + 64)
#define READ_CHUNK (64 * 1024)
#define MAX_PROCS 256
#define MAX_MARKS 4096
#define STDIN_CAP (8 * 1024 * 1024)
#define QUEUE_CAP (8 * 1024 * 1024) /* bytes queued towards the server before reads stop */
#define PIPE_GRACE_MS 250           /* after the exit: pipes held open by leftover children */
#define PTY_QUIET_MS 200            /* after the exit: a terminal still held open counts as drained */
#define PTY_MAX_DRAIN_MS 5000

enum { S_HELLO = 1, S_SPAWN, S_STDIN, S_CLOSE_STDIN, S_RESIZE, S_SIGNAL, S_ACK, S_PAUSE, S_RESUME, S_FORGET, S_LIST, S_DETACH, S_EGRESS };
enum { A_HELLO = 1, A_SPAWNED, A_FAILED, A_OUTPUT, A_EXIT, A_ERROR, A_STDIN_ACK, A_PROC, A_LIST_END, A_EGRESS, A_TUNNEL };
enum { ST_STDOUT = 1, ST_STDERR = 2, ST_PTY = 3 };

/* One piece of output: queued to the server and/or kept in a process's retention. */
typedef struct seg {
  int refs;
  struct seg *next; /* retention list */
  uint64_t offset;
  uint32_t len;
  unsigned char stream;
  unsigned char data[];
} seg;

typedef struct qitem {
  seg *s;                     /* output or control payload */
  unsigned char hdr[HDR + 8]; /* frame header (+ offset for output) */
  uint32_t hlen;
  uint32_t total;             /* header + payload bytes */
  uint32_t sent;
  struct qitem *next;
} qitem;

typedef struct proc {
  int used;
  uint32_t handle;
  pid_t pid;
  int pty;              /* 1: master in fds[0] */
  int fds[2];           /* output fds (pipe: stdout, stderr; pty: master, -1) */
  int in_fd;            /* stdin write end (pipe) or master dup (pty) */
  unsigned char *in_buf;
  size_t in_len, in_cap;
  int close_stdin_after;
  uint64_t in_written;
  int in_acked_dirty;
  int paused;
  int exited;           /* reaped */
  int status;
  long long exited_at, last_data;
  int reported;         /* EXIT queued */
  int forgotten;        /* the server let it go while it ran: freed once reaped */
  uint64_t total;       /* output bytes read so far (the next offset) */
  uint64_t acked;       /* server has everything up to this offset */
  seg *ret_head, *ret_tail;
  uint64_t ret_bytes;
  uint64_t (*marks)[2];
  int nmarks;
  char *tag;
  char mode[16];
} proc;

static proc procs[MAX_PROCS];
static uint32_t retention = 1024 * 1024, window_bytes = 2 * 1024 * 1024;
static int conn_in = -1, conn_out = -1, conn_ctl = -1, listen_fd = -1, sig_fd = -1;
static unsigned char inbuf[HDR + MAX_PAYLOAD];
static size_t inlen;
static qitem *q_head, *q_tail;
static size_t q_bytes;
static int detaching;
/* The server's link (exec-agent start SOCKET LINK): dialled whenever no connection is up. */
#define LINK_MAGIC "EXAGLNK1"
#define SECRET_LEN 32
static char link_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static unsigned char link_secret[SECRET_LEN];
static int link_set;
static long long link_next_dial; /* ms; 0: now */
static int link_backoff_ms;      /* after a failed dial; reset by a server's hello */
static long long streaming_at; /* last output read (ms): while output streams, poll spins */
#define SPIN_MS 1
/*
 * While output streams without a pause, what was read waits up to HOLD_US (or until HOLD_BYTES
 * are queued) for more before it is written to the server: a terminal hands out at most 4 KiB
 * per read, and each frame costs the server a parse, a log chunk, a client frame and an
 * acknowledgement back here (which wakes this loop). Output that starts after a pause, or
 * that sits behind a control frame (an exit, a reply), is never held.
 */
#define HOLD_US 500
#define HOLD_BYTES (64 * 1024)
#define HOLD_NAP_NS 100000 /* a held stream naps between polls instead of spinning */
#define STREAK_US 1000 /* output counts as a stream once it has run this long without a pause */
static long long q_first_us;  /* when the oldest unwritten frame was queued */
static int q_ctl;             /* control frames queued */
static long long streak_start_us, last_read_us;

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static long long now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void put32(unsigned char *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
static uint32_t get32(const unsigned char *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

static seg *seg_new(uint32_t cap) {
  seg *s = malloc(sizeof(seg) + cap);
  if (!s) { perror("exec-agent: out of memory"); exit(70); }
  s->refs = 1; s->next = NULL; s->offset = 0; s->len = 0; s->stream = 0;
  return s;
}
static void seg_unref(seg *s) { if (--s->refs == 0) free(s); }

/* Queues a frame whose payload is s->data (control) or the offset then s->data (output). */
static void enqueue(seg *s, int type, int stream, uint32_t handle, int with_offset) {
  if (conn_out < 0) { seg_unref(s); return; } /* nobody attached: retention has what matters */
  qitem *it = malloc(sizeof *it);
  if (!it) { perror("exec-agent: out of memory"); exit(70); }
  uint32_t plen = s->len + (with_offset ? 8 : 0);
  put32(it->hdr, plen); it->hdr[4] = (unsigned char)type; it->hdr[5] = (unsigned char)stream; it->hdr[6] = 0; it->hdr[7] = 0;
  put32(it->hdr + 8, handle);
  if (with_offset) put64(it->hdr + HDR, s->offset);
  it->hlen = HDR + (with_offset ? 8 : 0);
  it->s = s; it->total = HDR + plen; it->sent = 0; it->next = NULL;
  if (!q_head) q_first_us = now_us();
  if (type != A_OUTPUT) q_ctl++;
  if (q_tail) q_tail->next = it; else q_head = it;
  q_tail = it;
  q_bytes += it->total;
}

static void send_ctl(int type, uint32_t handle, const void *payload, uint32_t len) {
  seg *s = seg_new(len);
  memcpy(s->data, payload, len);
  s->len = len;
  enqueue(s, type, 0, handle, 0);
}

static void send_text(int type, uint32_t handle, const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if (n >= (int)sizeof buf) n = sizeof buf - 1;
  send_ctl(type, handle, buf, (uint32_t)n);
}

static void q_free_all(void) {
  while (q_head) { qitem *it = q_head; q_head = it->next; seg_unref(it->s); free(it); }
  q_tail = NULL; q_bytes = 0; q_ctl = 0;
}

/* Lets the current connection go: queued frames are dropped (retention keeps the output). */
static void drop_connection(void) {
  if (conn_in >= 0) close(conn_in);
  if (conn_out >= 0 && conn_out != conn_in) close(conn_out);
  if (conn_ctl >= 0) close(conn_ctl); /* the attacher sees EOF and exits: the exec ends */
  conn_in = conn_out = conn_ctl = -1;
  inlen = 0;
  detaching = 0;
  q_free_all();
  if (link_set) link_next_dial = now_ms() + link_backoff_ms;
}

static void link_grow_backoff(void) {
  link_backoff_ms = link_backoff_ms == 0 ? 50 : (link_backoff_ms >= 500 ? 1000 : link_backoff_ms * 2);
}

/*
 * A non-blocking connection to the server's link socket that has sent the greeting: `magic`
 * (LINK_MAGIC for the link, TUNNEL_MAGIC for one egress tunnel), then the link secret. -1 when
 * the server is not there or did not take the whole greeting at once.
 */
static int dial_greeted(const char *magic) {
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  snprintf(a.sun_path, sizeof a.sun_path, "%s", link_path);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return -1;
  struct iovec iov[2] = { { (void *)magic, strlen(magic) }, { link_secret, SECRET_LEN } };
  struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
  if (connect(s, (struct sockaddr *)&a, sizeof a) == 0 &&
      sendmsg(s, &m, MSG_NOSIGNAL) == (ssize_t)(iov[0].iov_len + iov[1].iov_len))
    return s;
  close(s);
  return -1;
}

/*
 * Connects out to the server's link and sends the greeting (magic, then the secret). A server
 * that is not there (restarting) is tried again later: 50 ms, doubling up to 1 s, reset once a
 * server answers the hello. Non-blocking: a server that does not accept never stalls the loop.
 */
static void dial_link(void) {
  link_grow_backoff(); /* undone by the hello; a server that drops us at once is tried later */
  int s = dial_greeted(LINK_MAGIC);
  if (s >= 0) {
    conn_in = conn_out = s;
    return;
  }
  link_next_dial = now_ms() + link_backoff_ms;
}

static void flush_queue(void) {
  while (q_head && conn_out >= 0) {
    struct iovec iov[64];
    int n = 0;
    for (qitem *it = q_head; it && n < 63; it = it->next) {
      if (it->sent < it->hlen) {
        iov[n].iov_base = it->hdr + it->sent; iov[n].iov_len = it->hlen - it->sent; n++;
        iov[n].iov_base = it->s->data; iov[n].iov_len = it->s->len; n++;
      } else {
        uint32_t off = it->sent - it->hlen;
        iov[n].iov_base = it->s->data + off; iov[n].iov_len = it->s->len - off; n++;
      }
    }
    ssize_t w = writev(conn_out, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      drop_connection();
      return;
    }
    size_t left = (size_t)w;
    while (left > 0 && q_head) {
      qitem *it = q_head;
      uint32_t rest = it->total - it->sent;
      if (left < rest) { it->sent += (uint32_t)left; q_bytes -= left; break; }
      left -= rest; q_bytes -= rest;
      if (it->hdr[4] != A_OUTPUT) q_ctl--;
      q_head = it->next;
      if (!q_head) q_tail = NULL;
      else q_first_us = now_us(); /* what is left waits its own hold at most */
      seg_unref(it->s); free(it);
    }
  }
}

static proc *find(uint32_t handle) {
  for (int i = 0; i < MAX_PROCS; i++) if (procs[i].used && procs[i].handle == handle) return &procs[i];
  return NULL;
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static void retain(proc *p, seg *s) {
  s->refs++;
  if (p->ret_tail) p->ret_tail->next = s; else p->ret_head = s;
  p->ret_tail = s;
  p->ret_bytes += s->len;
  /* Newest `retention` bytes kept, at least the newest piece (as the server's log does). */
  while (p->ret_bytes > retention && p->ret_head != p->ret_tail) {
    seg *old = p->ret_head;
    p->ret_head = old->next;
    p->ret_bytes -= old->len;
    seg_unref(old);
  }
  if (p->nmarks > 0 && p->ret_head) {
    int k = 0;
    while (k < p->nmarks && p->marks[k][1] <= p->ret_head->offset) k++;
    if (k > 0) { memmove(p->marks, p->marks + k, (size_t)(p->nmarks - k) * sizeof p->marks[0]); p->nmarks -= k; }
  }
}

static void close_fd(int *fd) { if (*fd >= 0) { close(*fd); *fd = -1; } }

static void free_proc(proc *p) {
  close_fd(&p->fds[0]); close_fd(&p->fds[1]); close_fd(&p->in_fd);
  while (p->ret_head) { seg *s = p->ret_head; p->ret_head = s->next; seg_unref(s); }
  free(p->in_buf); free(p->marks); free(p->tag);
  memset(p, 0, sizeof *p);
  p->fds[0] = p->fds[1] = p->in_fd = -1;
}

#define MAX_KEPT_EXITED 64 /* ended records kept for a restarted server (each holds its retention) */


static void report_exit(proc *p) {
  if (p->reported) return;
  p->reported = 1;
  int kept = 0, oldest = -1;
  for (int i = 0; i < MAX_PROCS; i++)
    if (procs[i].used && procs[i].reported) {
      kept++;
      if (&procs[i] != p && (oldest < 0 || procs[i].exited_at < procs[oldest].exited_at)) oldest = i;
    }
  if (kept > MAX_KEPT_EXITED && oldest >= 0) free_proc(&procs[oldest]);
  close_fd(&p->fds[0]); close_fd(&p->fds[1]); close_fd(&p->in_fd);
  if (WIFSIGNALED(p->status)) send_text(A_EXIT, p->handle, "signaled%c%d", 0, WTERMSIG(p->status));
  else send_text(A_EXIT, p->handle, "exited%c%d", 0, WEXITSTATUS(p->status));
}

/* Reads one piece of a process's output; 0 at EOF (or EIO on a terminal), -1 when it would block. */
static int read_output(proc *p, int i) {
  seg *s = seg_new(READ_CHUNK);
  ssize_t n = read(p->fds[i], s->data, READ_CHUNK);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) { seg_unref(s); return -1; }
  if (n <= 0) { seg_unref(s); close_fd(&p->fds[i]); return 0; }
  /* A terminal hands out at most 4 KiB per read: take what else is there into the same frame. */
  while (p->pty && n < READ_CHUNK) {
    ssize_t more = read(p->fds[i], s->data + n, READ_CHUNK - (size_t)n);
    if (more <= 0) break; /* EAGAIN, or EIO at the end: the next poll sees it again */
    n += more;
  }
  streaming_at = now_ms();
  long long read_us = now_us();
  if (read_us - last_read_us > SPIN_MS * 1000) streak_start_us = read_us;
  last_read_us = read_us;
  if (n < READ_CHUNK / 2) {
    seg *t = realloc(s, sizeof(seg) + (size_t)n);
    if (t) s = t;
  }
  s->len = (uint32_t)n;
  s->stream = p->pty ? ST_PTY : (i == 0 ? ST_STDOUT : ST_STDERR);
  s->offset = p->total;
  p->total += (uint64_t)n;
  p->last_data = now_ms();
  retain(p, s);
  enqueue(s, A_OUTPUT, s->stream, p->handle, 1);
  return 1;
}

/* --- spawning ------------------------------------------------------------------------------ */

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

static void do_spawn(uint32_t handle, unsigned char *payload, uint32_t len) {
  if (find(handle)) { send_text(A_FAILED, handle, "EEXIST%chandle already in use", 0); return; }
  if (len == 0 || payload[len - 1] != 0) { send_text(A_FAILED, handle, "EINVAL%cmalformed spawn frame", 0); return; }
  /* Fields, NUL-terminated: mode rows cols uid gid cwd arg0 argc argv... envc env... tag */
  char *f[8];
  char *c = (char *)payload, *end = (char *)payload + len;
  for (int k = 0; k < 8; k++) { if (c >= end) { send_text(A_FAILED, handle, "EINVAL%cmalformed spawn frame", 0); return; } f[k] = c; c += strlen(c) + 1; }
  long argc = strtol(f[7], NULL, 10);
  if (argc < 1 || argc > 65536) { send_text(A_FAILED, handle, "EINVAL%cbad argc", 0); return; }
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  for (long k = 0; k < argc; k++) { if (c >= end) { free(argv); send_text(A_FAILED, handle, "EINVAL%cmalformed spawn frame", 0); return; } argv[k] = c; c += strlen(c) + 1; }
  if (c >= end) { free(argv); send_text(A_FAILED, handle, "EINVAL%cmalformed spawn frame", 0); return; }
  long envc = strtol(c, NULL, 10);
  c += strlen(c) + 1;
  if (envc < 0 || envc > 65536) { free(argv); send_text(A_FAILED, handle, "EINVAL%cbad envc", 0); return; }
  char **envp = calloc((size_t)envc + 1, sizeof *envp);
  for (long k = 0; k < envc; k++) { if (c >= end) { free(argv); free(envp); send_text(A_FAILED, handle, "EINVAL%cmalformed spawn frame", 0); return; } envp[k] = c; c += strlen(c) + 1; }
  const char *tag = c < end ? c : "";
  const char *mode = f[0];
  int pty = strcmp(mode, "pty") == 0, with_stdin = strcmp(mode, "pipe") == 0;
  if (!pty && !with_stdin && strcmp(mode, "pipe-no-stdin") != 0) { free(argv); free(envp); send_text(A_FAILED, handle, "EINVAL%cunknown mode %s", 0, mode); return; }
  int slot = -1;
  for (int i = 0; i < MAX_PROCS; i++) if (!procs[i].used) { slot = i; break; }
  if (slot < 0) {
    /* Full of records: the oldest reported exit goes (a server that never said FORGET). */
    long long oldest = 0;
    for (int i = 0; i < MAX_PROCS; i++)
      if (procs[i].reported && (slot < 0 || procs[i].exited_at < oldest)) { slot = i; oldest = procs[i].exited_at; }
    if (slot >= 0) free_proc(&procs[slot]);
  }
  if (slot < 0) { free(argv); free(envp); send_text(A_FAILED, handle, "EAGAIN%ctoo many processes in the agent", 0); return; }
  uid_t uid = (uid_t)strtoul(f[3], NULL, 10);
  gid_t gid = (gid_t)strtoul(f[4], NULL, 10);
  struct winsize ws = { .ws_row = (unsigned short)strtoul(f[1], NULL, 10), .ws_col = (unsigned short)strtoul(f[2], NULL, 10) };
  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, master = -1;
  char slave_name[64] = "";
  if (pty) {
    master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    int unlock = 0, n = -1;
    if (master < 0 || ioctl(master, TIOCSPTLCK, &unlock) < 0 || ioctl(master, TIOCGPTN, &n) < 0) {
      int e = errno;
      if (master >= 0) close(master);
      free(argv); free(envp);
      send_text(A_FAILED, handle, "%d%cno terminal: %s", e, 0, strerror(e));
      return;
    }
    snprintf(slave_name, sizeof slave_name, "/dev/pts/%d", n);
    ioctl(master, TIOCSWINSZ, &ws);
  } else if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || (with_stdin && pipe2(in, O_CLOEXEC) < 0)) {
    int e = errno;
    close_fd(&out[0]); close_fd(&out[1]); close_fd(&err[0]); close_fd(&err[1]); close_fd(&in[0]); close_fd(&in[1]);
    free(argv); free(envp);
    send_text(A_FAILED, handle, "%d%cpipe: %s", e, 0, strerror(e));
    return;
  }
  /* A pipe is 0600 for its maker (root), and opening /dev/stdout goes through the pipe's own mode:
   * a command running as the container's user got EACCES. Reaching a pipe by name takes access to
   * /proc/PID/fd of a holder, so the mode opens nothing more. */
  int *ends[] = { out, err, in };
  for (int k = 0; k < 6; k++) if (ends[k / 2][k % 2] >= 0) (void)fchmod(ends[k / 2][k % 2], 0666);
  int report[2] = {-1, -1};
  if (pipe2(report, O_CLOEXEC) < 0) report[0] = report[1] = -1;
  pid_t pid = fork();
  if (pid == 0) {
    spawn_report = report[1];
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    for (int s = 1; s < 32; s++) signal(s, SIG_DFL);
    umask(command_umask);
    setsid();
    if (pty) {
      int slave = open(slave_name, O_RDWR);
      if (slave < 0) child_fail(126, "open terminal", slave_name, errno);
      ioctl(slave, TIOCSCTTY, 0);
      if (uid != 0) { int ignored = fchown(slave, uid, (gid_t)-1); (void)ignored; }
      dup2(slave, 0); dup2(slave, 1); dup2(slave, 2);
      if (slave > 2) close(slave);
    } else {
      int devnull = open("/dev/null", O_RDONLY);
      dup2(with_stdin ? in[0] : devnull, 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      if (devnull > 2) close(devnull);
    }
    if (uid != 0 || gid != 0) {
      if (setgroups(1, &gid) < 0 || setgid(gid) < 0 || setuid(uid) < 0) child_fail(126, "cannot switch user", NULL, errno);
      prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
    /* After the uid change (which clears it): the command dies with the agent, never orphaned. */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() == 1) _exit(137);
    environ = envp;
    fix_home(uid);
    if (chdir(f[5]) < 0) child_spawn_fail(126, "cwd", f[5], errno);
    const char *file = argv[0];
    if (f[6][0]) argv[0] = f[6];
    execvp(file, argv);
    child_spawn_fail(errno == ENOENT ? 127 : 126, file, NULL, errno);
  }
  int e = errno;
  free(argv); free(envp);
  if (report[1] >= 0) close(report[1]);
  if (pid > 0 && report[0] >= 0) {
    /* The child's exec closes the pipe (CLOEXEC); a failure writes its reason first. */
    char why[1024];
    size_t got = 0;
    for (;;) {
      ssize_t n = read(report[0], why + got, sizeof why - 1 - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += (size_t)n;
      if (got == sizeof why - 1) break;
    }
    close(report[0]);
    if (got > 0) {
      waitpid(pid, NULL, 0);
      close_fd(&master); close_fd(&out[0]); close_fd(&out[1]); close_fd(&err[0]); close_fd(&err[1]); close_fd(&in[0]); close_fd(&in[1]);
      send_ctl(A_FAILED, handle, why, (uint32_t)got);
      return;
    }
  } else if (report[0] >= 0) {
    close(report[0]);
  }
  if (pid < 0) {
    close_fd(&master); close_fd(&out[0]); close_fd(&out[1]); close_fd(&err[0]); close_fd(&err[1]); close_fd(&in[0]); close_fd(&in[1]);
    send_text(A_FAILED, handle, "%d%cfork: %s", e, 0, strerror(e));
    return;
  }
  proc *p = &procs[slot];
  memset(p, 0, sizeof *p);
  p->used = 1;
  p->handle = handle;
  p->pid = pid;
  p->pty = pty;
  snprintf(p->mode, sizeof p->mode, "%s", mode);
  p->tag = strdup(tag);
  p->last_data = now_ms();
  if (pty) {
    p->fds[0] = master; p->fds[1] = -1;
    p->in_fd = dup(master);
    fcntl(p->in_fd, F_SETFD, FD_CLOEXEC);
  } else {
    close(out[1]); close(err[1]);
    p->fds[0] = out[0]; p->fds[1] = err[0];
    if (with_stdin) { close(in[0]); p->in_fd = in[1]; } else p->in_fd = -1;
  }
  for (int i = 0; i < 2; i++) if (p->fds[i] >= 0) set_nonblock(p->fds[i]);
  if (p->in_fd >= 0) set_nonblock(p->in_fd);
  send_text(A_SPAWNED, handle, "%d", (int)pid);
}

/* --- frames from the server ---------------------------------------------------------------- */

static void flush_stdin(proc *p) {
  while (p->in_len > 0 && p->in_fd >= 0) {
    ssize_t w = write(p->in_fd, p->in_buf, p->in_len);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      p->in_len = 0; /* the command closed its stdin: what it never read is dropped, as with a pipe */
      close_fd(&p->in_fd);
      break;
    }
    memmove(p->in_buf, p->in_buf + w, p->in_len - (size_t)w);
    p->in_len -= (size_t)w;
    p->in_written += (uint64_t)w;
    p->in_acked_dirty = 1;
  }
  if (p->in_len == 0 && p->close_stdin_after && !p->pty) close_fd(&p->in_fd);
}

static void signal_session(pid_t sid, int signo) {
  /* Right after the fork the child may not have made its session yet: it is alone then. */
  if (kill(-sid, signo) < 0 && errno == ESRCH) kill(sid, signo);
  if (signo != SIGKILL) return;
  /* Children that made their own process group (job control) still share the session. */
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    pid_t pid = (pid_t)atoi(e->d_name);
    if (pid <= 0) continue;
    if (getsid(pid) == sid) kill(pid, SIGKILL);
  }
  if (d) closedir(d);
}

#include "exec-agent-egress.c"
#include "exec-agent-relay.c"

static void handle_frame(int type, uint32_t handle, unsigned char *pl, uint32_t len) {
  proc *p = handle ? find(handle) : NULL;
  switch (type) {
  case S_HELLO: {
    if (len < 12) { send_text(A_ERROR, 0, "malformed hello"); return; }
    uint32_t version = get32(pl);
    if (version != PROTOCOL_VERSION) { send_text(A_ERROR, 0, "unsupported protocol version %u (agent speaks %d)", version, PROTOCOL_VERSION); detaching = 1; return; }
    uint32_t r = get32(pl + 4), w = get32(pl + 8);
    if (r >= 1024 && r <= 256u * 1024 * 1024) retention = r;
    if (w >= 64 * 1024 && w <= 64u * 1024 * 1024) window_bytes = w;
    int n = 0;
    for (int i = 0; i < MAX_PROCS; i++) n += procs[i].used;
    send_text(A_HELLO, 0, "version=%d\npid=%d\nprocesses=%d\n", PROTOCOL_VERSION, (int)getpid(), n);
    link_backoff_ms = 0; /* a server answered: the next break is dialled again at once */
    return;
  }
  case S_SPAWN: do_spawn(handle, pl, len); return;
  case S_LIST: {
    for (int i = 0; i < MAX_PROCS; i++) {
      proc *q = &procs[i];
      if (!q->used) continue;
      /* tag, mode, pid, first retained offset, total, then seq,end pairs; output follows. */
      size_t cap = strlen(q->tag) + 128 + (size_t)q->nmarks * 44;
      char *buf = malloc(cap);
      if (!buf) { perror("exec-agent: out of memory"); exit(70); }
      uint64_t first = q->ret_head ? q->ret_head->offset : q->total;
      int n = snprintf(buf, cap, "%s%c%s%c%d%c%llu%c%llu%c%d", q->tag, 0, q->mode, 0, (int)q->pid, 0, (unsigned long long)first, 0,
                       (unsigned long long)q->total, 0, q->nmarks);
      for (int k = 0; k < q->nmarks; k++)
        n += snprintf(buf + n, cap - (size_t)n, "%c%llu,%llu", 0, (unsigned long long)q->marks[k][0], (unsigned long long)q->marks[k][1]);
      send_ctl(A_PROC, q->handle, buf, (uint32_t)n);
      free(buf);
      for (seg *s = q->ret_head; s; s = s->next) {
        s->refs++;
        enqueue(s, A_OUTPUT, s->stream, q->handle, 1);
      }
      q->acked = first; /* the new server acknowledges the replay like fresh output */
      if (q->reported) { q->reported = 0; report_exit(q); }
    }
    send_ctl(A_LIST_END, 0, "", 0);
    return;
  }
  case S_DETACH: detaching = 1; return;
  case S_EGRESS: {
    /* u16 port: the session's proxy listens on 127.0.0.1:port (exec-agent-egress.c); then an
     * optional u8 of flags: 1, the server's relay takes client sockets (EXAGTUN2 tunnels). */
    int port = len >= 2 ? pl[0] | pl[1] << 8 : 0;
    int e = port > 0 ? egress_listen(port) : EINVAL;
    if (!e) egress_pass = len >= 3 && (pl[2] & 1) && link_set;
    if (e) send_text(A_ERROR, handle, "egress proxy on 127.0.0.1:%d: %s", port, e == ENOTCONN ? "the agent has no link to carry tunnels" : strerror(e));
    else send_text(A_EGRESS, handle, "%d", port);
    return;
  }
  default: break;
  }
  if (type < S_HELLO || type > S_EGRESS) { send_text(A_ERROR, handle, "unknown frame type %d", type); return; }
  if (!p) {
    if (type != S_ACK && type != S_FORGET) send_text(A_ERROR, handle, "unknown process handle %u", handle);
    return;
  }
  switch (type) {
  case S_STDIN:
    if (p->in_fd < 0 || p->close_stdin_after) return;
    if (p->in_len + len > STDIN_CAP) { send_text(A_ERROR, handle, "stdin buffer full (%d bytes not yet read by the process)", STDIN_CAP); return; }
    if (p->in_len + len > p->in_cap) {
      size_t cap = p->in_cap ? p->in_cap : 4096;
      while (cap < p->in_len + len) cap *= 2;
      unsigned char *b = realloc(p->in_buf, cap);
      if (!b) { send_text(A_ERROR, handle, "out of memory for stdin"); return; }
      p->in_buf = b; p->in_cap = cap;
    }
    memcpy(p->in_buf + p->in_len, pl, len);
    p->in_len += len;
    flush_stdin(p);
    return;
  case S_CLOSE_STDIN:
    p->close_stdin_after = 1;
    flush_stdin(p);
    return;
  case S_RESIZE:
    if (len < 4 || !p->pty || p->fds[0] < 0) return;
    {
      struct winsize ws = { .ws_row = (unsigned short)(pl[0] | pl[1] << 8), .ws_col = (unsigned short)(pl[2] | pl[3] << 8) };
      ioctl(p->fds[0], TIOCSWINSZ, &ws);
    }
    return;
  case S_SIGNAL:
    if (len < 4) return;
    if (!p->exited || get32(pl) == SIGKILL) signal_session(p->pid, (int)get32(pl));
    return;
  case S_ACK:
    for (uint32_t k = 0; k + 16 <= len; k += 16) {
      uint64_t seq = get64(pl + k), endoff = get64(pl + k + 8);
      if (endoff > p->total) endoff = p->total;
      if (endoff > p->acked) p->acked = endoff;
      if (seq == 0) continue; /* credit only */
      if (!p->marks) p->marks = malloc(sizeof(uint64_t[2]) * MAX_MARKS);
      if (!p->marks) return;
      if (p->nmarks == MAX_MARKS) { memmove(p->marks, p->marks + 1, (MAX_MARKS - 1) * sizeof p->marks[0]); p->nmarks--; }
      p->marks[p->nmarks][0] = seq;
      p->marks[p->nmarks][1] = endoff;
      p->nmarks++;
    }
    return;
  case S_PAUSE: p->paused = 1; return;
  case S_RESUME: p->paused = 0; return;
  case S_FORGET:
    if (!p->exited) { signal_session(p->pid, SIGKILL); p->forgotten = 1; return; } /* freed once reaped */
    free_proc(p);
    return;
  }
}

/* Parses whole frames from the connection; a frame too large to be ours ends the connection. */
static void read_connection(void) {
  ssize_t n = read(conn_in, inbuf + inlen, sizeof inbuf - inlen);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) { drop_connection(); return; } /* the server went away: keep running, keep output */
  inlen += (size_t)n;
  size_t pos = 0;
  while (inlen - pos >= HDR) {
    uint32_t len = get32(inbuf + pos);
    if (len > MAX_PAYLOAD) {
      send_text(A_ERROR, 0, "frame of %u bytes exceeds the limit of %d", len, MAX_PAYLOAD);
      detaching = 1;
      inlen = 0;
      return;
    }
    if (inlen - pos < HDR + len) break;
    handle_frame(inbuf[pos + 4], get32(inbuf + pos + 8), inbuf + pos + HDR, len);
    if (conn_in < 0) return;
    pos += HDR + len;
  }
  memmove(inbuf, inbuf + pos, inlen - pos);
  inlen -= pos;
}

/* --- the daemon ---------------------------------------------------------------------------- */

static void accept_attach(void) {
  int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (c < 0) return;
  char byte = 0;
  char cbuf[CMSG_SPACE(2 * sizeof(int))];
  struct iovec iov = { &byte, 1 };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  struct timeval tv = { 2, 0 };
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (recvmsg(c, &m, MSG_CMSG_CLOEXEC) <= 0) { close(c); return; }
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
  if (!cm && byte == 't') {
    egress_hand_over(c);
    close(c);
    return;
  }
  if (!cm && byte == 'u') {
    /* `exec-agent start SOCKET LINK`: the secret, then the link's path (NUL-padded). */
    unsigned char msg[SECRET_LEN + sizeof link_path];
    if (recv(c, msg, sizeof msg, MSG_WAITALL) == (ssize_t)sizeof msg && memchr(msg + SECRET_LEN, 0, sizeof link_path)) {
      memcpy(link_secret, msg, SECRET_LEN);
      memcpy(link_path, msg + SECRET_LEN, sizeof link_path);
      link_set = 1;
      /* The server runs `start` only when it has no connection to us: one we still hold is an
       * earlier server's (the newest server wins, as with an attach). */
      if (conn_in >= 0) drop_connection();
      link_backoff_ms = 0;
      link_next_dial = 0; /* the server waits for it now */
      char ok = 'k';
      ssize_t ignored = send(c, &ok, 1, MSG_NOSIGNAL); (void)ignored;
    }
    close(c);
    return;
  }
  if (!cm || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(2 * sizeof(int))) { close(c); return; }
  int fds[2];
  memcpy(fds, CMSG_DATA(cm), sizeof fds);
  drop_connection(); /* the newest server wins */
  conn_in = fds[0];
  conn_out = fds[1];
  conn_ctl = c;
  set_nonblock(conn_in);
  set_nonblock(conn_out);
  /* Acknowledged offsets are re-established by the new server (after LIST). */
}

static void reap(void) {
  struct signalfd_siginfo si;
  while (read(sig_fd, &si, sizeof si) > 0) {}
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (int i = 0; i < MAX_PROCS; i++) {
      proc *p = &procs[i];
      if (p->used && p->pid == pid && !p->exited) {
        p->exited = 1;
        p->status = status;
        p->exited_at = now_ms();
        if (p->forgotten) free_proc(p);
      }
    }
  }
}

/* Reports the exits that are due; returns the ms until the next one is (or -1). */
static int due_exits(void) {
  long long now = now_ms();
  int timeout = -1;
  for (int i = 0; i < MAX_PROCS; i++) {
    proc *p = &procs[i];
    if (!p->used || p->reported || p->forgotten || !p->exited) continue;
    int left;
    if (p->fds[0] < 0 && p->fds[1] < 0) left = 0;
    else if (p->pty) {
      long long quiet = p->last_data + PTY_QUIET_MS - now, max = p->exited_at + PTY_MAX_DRAIN_MS - now;
      left = (int)(quiet < max ? quiet : max);
    } else left = (int)(p->exited_at + PIPE_GRACE_MS - now);
    if (left <= 0) report_exit(p);
    else if (timeout < 0 || left < timeout) timeout = left;
  }
  return timeout;
}

/* Whether the queue may wait for more output (HOLD_US): only a stream's output, unwritten. */
static int hold_output(void) {
  if (!q_head || q_ctl > 0 || q_bytes >= HOLD_BYTES || q_head->sent > 0 || detaching) return 0;
  long long t = now_us();
  return t - streak_start_us >= STREAK_US && t - q_first_us < HOLD_US;
}

/*
 * Polls the loop's descriptors. While output streams, without sleeping for up to SPIN_MS,
 * yielding the CPU: on a virtual machine, waking a halted CPU for each piece a terminal or pipe
 * delivers costs more than the spin (the PTY relay measured the same). An idle session costs
 * nothing. While output is held it naps instead (HOLD_NAP_NS): the spin's CPU is the
 * container's, so it counts against the session's CPU limit (a terminal stream was throttled up
 * to 100 ms per 64 MB under --cpus 1), and the nap lets the terminal fill for the next read.
 * Returns poll's result, or -2 when a hold ended with nothing new to read.
 */
static int poll_events(struct pollfd *pf, int n, int timeout, int held) {
  int r = 0;
  int spun = now_ms() - streaming_at <= SPIN_MS;
  if (spun) {
    long long until = now_ms() + SPIN_MS;
    while ((r = poll(pf, (nfds_t)n, 0)) == 0 && now_ms() < until && !(held && !hold_output())) {
      if (held) { struct timespec nap = { 0, HOLD_NAP_NS }; nanosleep(&nap, NULL); }
      else sched_yield();
    }
  }
  if (r == 0 && held && spun) return -2;
  if (r == 0) r = poll(pf, (nfds_t)n, timeout);
  return r;
}

static void daemon_loop(void) {
  for (;;) {
    int timeout = due_exits();
    int held = hold_output();
    if (q_head && !held) flush_queue();
    if (detaching && !q_head) drop_connection();
    if (link_set && conn_in < 0) {
      if (now_ms() >= link_next_dial) dial_link();
      if (conn_in < 0) {
        long long wait = link_next_dial - now_ms();
        if (wait < 0) wait = 0;
        if (timeout < 0 || wait < timeout) timeout = (int)wait;
      }
    }
#define NPOLL (3 + MAX_PROCS * 3 + 1 + MAX_TUNNELS * 2)
    struct pollfd pf[NPOLL];
    proc *owner[NPOLL];
    int which[NPOLL];
    int n = 0;
    pf[n] = (struct pollfd){ listen_fd, POLLIN, 0 }; owner[n] = NULL; which[n++] = -1;
    pf[n] = (struct pollfd){ sig_fd, POLLIN, 0 }; owner[n] = NULL; which[n++] = -2;
    if (conn_in >= 0 && !detaching) { pf[n] = (struct pollfd){ conn_in, POLLIN, 0 }; owner[n] = NULL; which[n++] = -3; }
    if (conn_out >= 0 && q_head && !held) { pf[n] = (struct pollfd){ conn_out, POLLOUT, 0 }; owner[n] = NULL; which[n++] = -4; }
    if (conn_ctl >= 0) { pf[n] = (struct pollfd){ conn_ctl, POLLIN, 0 }; owner[n] = NULL; which[n++] = -5; }
    int queue_full = q_bytes >= QUEUE_CAP;
    for (int i = 0; i < MAX_PROCS; i++) {
      proc *p = &procs[i];
      if (!p->used || p->reported || p->forgotten) continue;
      int may_read = !p->paused && !queue_full && (conn_out < 0 || p->total - p->acked < window_bytes);
      /* Unattached: keep reading (retention drops the oldest) so commands never stall on us. */
      for (int k = 0; k < 2; k++)
        if (p->fds[k] >= 0 && may_read) { pf[n] = (struct pollfd){ p->fds[k], POLLIN, 0 }; owner[n] = p; which[n++] = k; }
      if (p->in_fd >= 0 && p->in_len > 0) { pf[n] = (struct pollfd){ p->in_fd, POLLOUT, 0 }; owner[n] = p; which[n++] = 2; }
    }
    int ne = egress_pollfds(pf + n, which + n);
    for (int k = 0; k < ne; k++) owner[n + k] = NULL;
    n += ne;
    if (queue_full && timeout < 0) timeout = 50;
    if (held && (timeout < 0 || timeout > 1)) timeout = 1;
    int r = poll_events(pf, n, timeout, held);
    if (r == -2) continue; /* the hold ended with nothing new: written at the top */
    if (r < 0 && errno != EINTR) { perror("exec-agent: poll"); exit(70); }
    for (int k = 0; r > 0 && k < n; k++) {
      if (!pf[k].revents) continue;
      proc *p = owner[k];
      switch (which[k]) {
      case -1: accept_attach(); break;
      case -2: reap(); break;
      case -3: if (conn_in >= 0) read_connection(); break;
      case -4: flush_queue(); break;
      case -5: if (conn_ctl >= 0) { char b; if (read(conn_ctl, &b, 1) <= 0) drop_connection(); } break;
      case 0: case 1:
        if (p->used && p->fds[which[k]] >= 0) {
          /* A few reads per wake-up keep a fast stream going without starving the others. */
          for (int j = 0; j < 4 && p->fds[which[k]] >= 0; j++)
            if (read_output(p, which[k]) <= 0 || p->total - p->acked >= window_bytes) break;
        }
        break;
      case 2: if (p->used) flush_stdin(p); break;
      default: if (which[k] <= -6) egress_event(which[k], pf[k].revents); break;
      }
    }
    for (int i = 0; i < MAX_PROCS; i++)
      if (procs[i].used && procs[i].in_acked_dirty) {
        unsigned char b[8];
        put64(b, procs[i].in_written);
        send_ctl(A_STDIN_ACK, procs[i].handle, b, 8);
        procs[i].in_acked_dirty = 0;
      }
  }
}

static int connect_socket(const char *path) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0) return s;
  if (s >= 0) close(s);
  return -1;
}

static void start_daemon(const char *path, int lock) {
  pid_t pid = fork();
  if (pid < 0) { perror("exec-agent: fork"); exit(70); }
  if (pid > 0) { waitpid(pid, NULL, 0); return; }
  close(lock); /* a copy would hold the attach lock for the daemon's whole life */
  setsid();
  if (fork() != 0) _exit(0);
  int devnull = open("/dev/null", O_RDWR);
  dup2(devnull, 0); dup2(devnull, 1);
  if (devnull > 2) close(devnull);
  /* stderr stays: the server's log of the first attach shows why a daemon died at start. */
  /* The daemon's own files are root's only; commands get back the umask it was started with
   * (the engine's 022), as a `docker exec` would give them: with 077 a file an unsandboxed
   * command wrote in the workspace was unreadable to a sandboxed one (another user). */
  command_umask = umask(077);
  int ignored = chdir("/"); (void)ignored;
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  for (int i = 0; i < MAX_PROCS; i++) { procs[i].fds[0] = procs[i].fds[1] = procs[i].in_fd = -1; }
  listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  unlink(path);
  if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(listen_fd, 8) < 0) { perror("exec-agent: listen"); _exit(70); }
  /* Root's only (umask 077, in the root-only control directory): the server never opens it. */
  int fd2 = open("/dev/null", O_WRONLY);
  dup2(fd2, 2);
  if (fd2 > 2) close(fd2);
  daemon_loop();
}

/* A connection to the daemon on `path`, started first when none answers; -1 if it never does. */
static int daemon_connection(const char *path) {
  char lock_path[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
  snprintf(lock_path, sizeof lock_path, "%s.lock", path);
  int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX) < 0) { perror("exec-agent: lock"); return -1; }
  int s = connect_socket(path);
  if (s < 0) {
    start_daemon(path, lock);
    for (int i = 0; i < 2000 && s < 0; i++) {
      struct timespec t = { 0, 1000000 };
      nanosleep(&t, NULL);
      s = connect_socket(path);
    }
  }
  close(lock);
  if (s < 0) fprintf(stderr, "exec-agent: the daemon did not start\n");
  return s;
}

static int attach(const char *path) {
  int s = daemon_connection(path);
  if (s < 0) return 70;
  char byte = 'a';
  int fds[2] = {0, 1};
  char cbuf[CMSG_SPACE(sizeof fds)];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = { &byte, 1 };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof fds);
  memcpy(CMSG_DATA(cm), fds, sizeof fds);
  if (sendmsg(s, &m, 0) < 0) { perror("exec-agent: sendmsg"); return 70; }
  /* Only the daemon holds the stream now; we stay until it lets the connection go. */
  int devnull = open("/dev/null", O_RDWR);
  dup2(devnull, 0); dup2(devnull, 1);
  char b;
  while (read(s, &b, 1) > 0) {}
  return 0;
}

/* The link secret from stdin: 64 hex digits. */
static int read_secret(unsigned char *secret) {
  char hex[2 * SECRET_LEN];
  size_t got = 0;
  while (got < sizeof hex) {
    ssize_t n = read(0, hex + got, sizeof hex - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  for (int i = 0; i < SECRET_LEN; i++) {
    unsigned v = 0;
    for (int k = 0; k < 2; k++) {
      char ch = hex[2 * i + k];
      unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0') : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10) : 16;
      if (d > 15) return -1;
      v = v * 16 + d;
    }
    secret[i] = (unsigned char)v;
  }
  return 0;
}

/* `start SOCKET LINK`: the daemon running on SOCKET, told to dial LINK with the secret. */
static int start_with_link(const char *sock, const char *link) {
  unsigned char msg[1 + SECRET_LEN + sizeof link_path];
  memset(msg, 0, sizeof msg);
  msg[0] = 'u';
  if (read_secret(msg + 1) < 0) { fprintf(stderr, "exec-agent: expected the link secret (64 hex digits) on stdin\n"); return 2; }
  memcpy(msg + 1 + SECRET_LEN, link, strlen(link));
  int s = daemon_connection(sock);
  if (s < 0) return 70;
  char ok = 0;
  if (send(s, msg, sizeof msg, MSG_NOSIGNAL) != (ssize_t)sizeof msg || recv(s, &ok, 1, MSG_WAITALL) != 1 || ok != 'k') {
    fprintf(stderr, "exec-agent: the daemon did not take the link\n");
    return 70;
  }
  close(s);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "version") == 0) { printf("%d\n", PROTOCOL_VERSION); return 0; }
  if (argc == 4 && strcmp(argv[1], "tunnel") == 0) return tunnel_main(argv[2], argv[3]);
  if (argc == 2 && strcmp(argv[1], "relayd") == 0) return relayd_main();
  if (argc >= 6 && strcmp(argv[1], "egress-wrap") == 0) return egress_wrap_main(argc, argv);
  if (argc == 4 && strcmp(argv[1], "start") == 0) {
    if (strlen(argv[2]) >= sizeof link_path || strlen(argv[3]) >= sizeof link_path) { fprintf(stderr, "exec-agent: socket path too long\n"); return 2; }
    return start_with_link(argv[2], argv[3]);
  }
  if (argc == 3 && (strcmp(argv[1], "attach") == 0 || strcmp(argv[1], "start") == 0)) {
    if (strlen(argv[2]) >= sizeof(((struct sockaddr_un *)0)->sun_path)) { fprintf(stderr, "exec-agent: socket path too long\n"); return 2; }
    if (argv[1][0] == 'a') return attach(argv[2]);
    /* The probe connection closes without a byte: the daemon drops it. */
    int s = daemon_connection(argv[2]);
    return s < 0 ? 70 : 0;
  }
  fprintf(stderr, "usage: exec-agent attach SOCKET | exec-agent start SOCKET [LINK] | exec-agent version\n");
  return 2;
}
