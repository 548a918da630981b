/*
 * The exec agent's egress relay (docs/architecture.md, "Egress"), included by exec-agent.c (one
 * translation unit, so the build stays one compiler call).
 *
 * A session with a network allow-list finds its proxy at 127.0.0.1:PORT inside its own network
 * namespace (the container keeps `--network none`): the agent listens there, and carries each
 * accepted connection to the server as a NEW connection on the server's agent link, opened with
 * the tunnel greeting (TUNNEL_MAGIC, then the link secret). The server speaks the proxy protocol
 * on it and decides what may be reached; the agent only relays bytes, so a tunnel is never
 * framed, multiplexed or copied through user space: each direction is a splice(2) through a
 * pipe, and a slow reader on one tunnel never stalls another or the command frames.
 *
 * Bounded: at most MAX_TUNNELS at once (further clients are closed at once), each direction at
 * most the pipe's capacity in flight.
 */
#define TUNNEL_MAGIC "EXAGTUN1"
#define MAX_TUNNELS 64
#define TUNNEL_PIPE (1024 * 1024)

typedef struct {
  int src, dst;      /* bytes flow src -> pipe -> dst */
  int pipe[2];
  size_t inpipe;     /* bytes in the pipe */
  size_t cap;        /* the pipe's capacity */
  int eof;           /* src ended */
  int shut;          /* dst was told (shutdown SHUT_WR) */
} tdir;

typedef struct {
  int used;
  int client, server;
  tdir d[2]; /* 0: client -> server, 1: server -> client */
} tunnel;

static tunnel tunnels[MAX_TUNNELS];
static int egress_fd = -1;
static int egress_port;

static void tunnel_close(tunnel *t) {
  close_fd(&t->client);
  close_fd(&t->server);
  for (int k = 0; k < 2; k++) { close_fd(&t->d[k].pipe[0]); close_fd(&t->d[k].pipe[1]); }
  t->used = 0;
}

/* Starts listening on 127.0.0.1:port (once; the same port again is a no-op). 0 or an errno. */
static int egress_listen(int port) {
  if (egress_fd >= 0) return port == egress_port ? 0 : EADDRINUSE;
  if (!link_set) return ENOTCONN; /* tunnels are carried on the link */
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return errno;
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = { htonl(INADDR_LOOPBACK) } };
  if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 128) < 0) { int e = errno; close(s); return e; }
  egress_fd = s;
  egress_port = port;
  return 0;
}

/* A new client: a tunnel to the server's link, greeted with the secret; closed when none can be had. */
static void egress_accept(void) {
  for (;;) {
    int c = accept4(egress_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return;
    tunnel *t = NULL;
    for (int i = 0; i < MAX_TUNNELS && !t; i++) if (!tunnels[i].used) t = &tunnels[i];
    if (!t) { close(c); continue; } /* bounded: the client sees its connection reset */
    unsigned char greeting[sizeof TUNNEL_MAGIC - 1 + SECRET_LEN];
    memcpy(greeting, TUNNEL_MAGIC, sizeof TUNNEL_MAGIC - 1);
    memcpy(greeting + sizeof TUNNEL_MAGIC - 1, link_secret, SECRET_LEN);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", link_path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0 ||
        send(s, greeting, sizeof greeting, MSG_NOSIGNAL) != (ssize_t)sizeof greeting) {
      if (s >= 0) close(s);
      close(c);
      continue;
    }
    memset(t, 0, sizeof *t);
    t->used = 1; t->client = c; t->server = s;
    int ok = 1;
    for (int k = 0; k < 2; k++) {
      t->d[k].pipe[0] = t->d[k].pipe[1] = -1;
      t->d[k].src = k == 0 ? c : s;
      t->d[k].dst = k == 0 ? s : c;
      if (pipe2(t->d[k].pipe, O_CLOEXEC | O_NONBLOCK) < 0) { ok = 0; continue; }
      fcntl(t->d[k].pipe[1], F_SETPIPE_SZ, TUNNEL_PIPE); /* best effort: the default 64 KiB works too */
      int cap = fcntl(t->d[k].pipe[1], F_GETPIPE_SZ);
      t->d[k].cap = cap > 0 ? (size_t)cap : 65536;
    }
    if (!ok) tunnel_close(t);
  }
}

/* Moves what it can of one direction; -1 when the tunnel must end (an error either side). */
static int tdir_pump(tdir *d) {
  while (!d->eof) {
    if (d->inpipe >= d->cap) break;
    ssize_t n = splice(d->src, NULL, d->pipe[1], NULL, d->cap - d->inpipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) { d->inpipe += (size_t)n; continue; }
    if (n == 0) { d->eof = 1; break; }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    return -1;
  }
  while (d->inpipe > 0) {
    ssize_t n = splice(d->pipe[0], NULL, d->dst, NULL, d->inpipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) { d->inpipe -= (size_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    return -1;
  }
  if (d->eof && d->inpipe == 0 && !d->shut) { shutdown(d->dst, SHUT_WR); d->shut = 1; }
  return 0;
}

static void tunnel_pump(tunnel *t) {
  if (!t->used) return;
  if (tdir_pump(&t->d[0]) < 0 || tdir_pump(&t->d[1]) < 0 || (t->d[0].shut && t->d[1].shut)) tunnel_close(t);
}

/* The poll entries of the egress listener and the tunnels; returns how many were added. */
static int egress_pollfds(struct pollfd *pf, int *which) {
  int n = 0;
  if (egress_fd >= 0) { pf[n] = (struct pollfd){ egress_fd, POLLIN, 0 }; which[n++] = -6; }
  for (int i = 0; i < MAX_TUNNELS; i++) {
    tunnel *t = &tunnels[i];
    if (!t->used) continue;
    /* One entry per socket: readable for its outgoing direction, writable for its incoming one. */
    for (int k = 0; k < 2; k++) {
      tdir *out = &t->d[k], *in = &t->d[1 - k];
      short ev = 0;
      if (!out->eof && out->inpipe < out->cap) ev |= POLLIN;
      if (in->inpipe > 0) ev |= POLLOUT;
      pf[n] = (struct pollfd){ out->src, ev, 0 };
      which[n++] = -100 - i;
    }
  }
  return n;
}

static void egress_event(int which, short revents) {
  if (which == -6) { egress_accept(); return; }
  tunnel *t = &tunnels[-100 - which];
  tunnel_pump(t);
  /* Hung up or failed with nothing left to read: the peer takes no more either (no busy loop). */
  if (t->used && (revents & (POLLERR | POLLHUP)) && !(revents & POLLIN)) tunnel_close(t);
}
