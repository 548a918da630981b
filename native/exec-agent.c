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
 *
 * The parts (exec-agent-*.c, included below in dependency order) share this file's types and
 * state as one translation unit, so the static binary stays one compiler call.
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

enum { S_HELLO = 1, S_SPAWN, S_STDIN, S_CLOSE_STDIN, S_RESIZE, S_SIGNAL, S_ACK, S_PAUSE, S_RESUME, S_FORGET, S_LIST, S_DETACH, S_EGRESS, S_NOTE };
enum { A_HELLO = 1, A_SPAWNED, A_FAILED, A_OUTPUT, A_EXIT, A_ERROR, A_STDIN_ACK, A_PROC, A_LIST_END, A_EGRESS, A_TUNNEL };
enum { ST_STDOUT = 1, ST_STDERR = 2, ST_PTY = 3 };
#define HELLO_PTY_PIN 1 /* hello flags: gather a terminal streaming fast on one CPU (pty-pin.h) */

#include "pty-pin.h"

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
  pin_pace pace;        /* a terminal streaming fast (pty-pin.h) */
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

/* Wall-clock ms: differences of it survive a checkpoint and restore, where the monotonic clock's
 * do not. */
static long long wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* When a server last said its session was used (NOTE; at first, when the daemon started): a
 * server that takes the session over continues its idle clock from there (HELLO's idle=). */
static long long noted_at;

static long long now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static void put32(unsigned char *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
static uint32_t get32(const unsigned char *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }
static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

/* A terminal streaming fast, gathered on one CPU with the agent (pty-pin.h), when the server
 * asks (its hello's flag, the operator's --pty-pin): which process and its session. */
static int pin_capable;
static uint32_t pinned_handle;
static pid_t pinned_sid;

/* The parts, in dependency order (one translation unit: the build stays one compiler call). */
#include "exec-agent-queue.c"
#include "exec-agent-procs.c"
#include "exec-agent-spawn.c"
#include "exec-agent-egress.c"
#include "exec-agent-relay.c"
#include "exec-agent-frames.c"
#include "exec-agent-daemon.c"

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
