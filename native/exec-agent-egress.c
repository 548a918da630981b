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
 * Without a link (gVisor: the agent is reached through the engine's exec stream) a client waits
 * as a PENDING tunnel and the agent announces it with a TUNNEL frame; the server then starts
 * `exec-agent tunnel SOCKET ID` as a process of the agent, whose stdin and stdout the protocol
 * already carries (with its flow control); that process takes the client's socket from the
 * daemon (SCM_RIGHTS) and relays it to its own stdin and stdout, with the same pump.
 *
 * Bounded: at most MAX_TUNNELS at once, each direction at most the pipe's capacity in flight; a
 * pending client not claimed within PENDING_MS is closed. A client the agent cannot carry (no
 * tunnel free, no server) is answered in HTTP (429, 502) and closed, never just reset: the
 * command sees why. MAX_TUNNELS is twice the server's limits for one session (64 relayed
 * connections, 64 request heads being read; src/egress/proxy.ts), so the server, which audits
 * its refusals, normally answers first; a tunnel the server answered is closed by the server at
 * once, which frees it here even when the client never closes.
 */
#define TUNNEL_MAGIC "EXAGTUN1"
/* A tunnel whose client socket may be handed to the server's relay once the server decided. */
#define TUNNEL_MAGIC_PASS "EXAGTUN2"
#define MAX_TUNNELS 128
#define TUNNEL_PIPE (1024 * 1024)
#define PENDING_MS 10000

typedef struct {
  int src, dst;      /* bytes flow src -> pipe -> dst */
  int pipe[2];
  size_t inpipe;     /* bytes in the pipe */
  size_t cap;        /* the pipe's capacity */
  unsigned long long moved; /* bytes delivered to dst */
  int eof;           /* src ended */
  int shut;          /* dst was told (shutdown SHUT_WR) */
  int hold;          /* src's end is not passed on yet (the server has not chosen its mode) */
  int stop;          /* src is read no more (its socket is being handed over) */
} tdir;

typedef struct {
  int used;             /* 1: relaying, 2: pending (waiting for `exec-agent tunnel`) */
  int mode;             /* EXAGTUN2: 1 waiting for the server's mode byte, 2 handing over; 0 relaying */
  uint32_t id;          /* a pending tunnel's number in its TUNNEL frame */
  long long since;
  int client, server;
  tdir d[2]; /* 0: client -> server, 1: server -> client */
} tunnel;

static int connect_socket(const char *path);
static tunnel tunnels[MAX_TUNNELS];
static uint32_t next_tunnel_id = 1;
static int egress_fd = -1;
static int egress_port;
static int egress_pass; /* the server takes client sockets (EGRESS flag 1): tunnels greet EXAGTUN2 */

/* Direction k of tunnel t: src -> pipe -> dst, its pipe made and sized. 0, or -1. */
static int tdir_init(tdir *d, int src, int dst) {
  memset(d, 0, sizeof *d);
  d->src = src; d->dst = dst;
  d->pipe[0] = d->pipe[1] = -1;
  if (pipe2(d->pipe, O_CLOEXEC | O_NONBLOCK) < 0) return -1;
  fcntl(d->pipe[1], F_SETPIPE_SZ, TUNNEL_PIPE); /* best effort: the default 64 KiB works too */
  int cap = fcntl(d->pipe[1], F_GETPIPE_SZ);
  d->cap = cap > 0 ? (size_t)cap : 65536;
  return 0;
}

static void tunnel_close(tunnel *t) {
  close_fd(&t->client);
  close_fd(&t->server);
  for (int k = 0; k < 2; k++) { close_fd(&t->d[k].pipe[0]); close_fd(&t->d[k].pipe[1]); }
  t->used = 0;
}

/* Starts listening on 127.0.0.1:port (once; the same port again is a no-op). 0 or an errno. */
static int egress_listen(int port) {
  if (egress_fd >= 0) return port == egress_port ? 0 : EADDRINUSE;
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

/*
 * Answers a client the agent cannot carry with `status` and `why` (the proxy's own format,
 * src/egress/proxy.ts), then closes it. What the client already sent is read first: closing a
 * socket with unread bytes resets it, and a reset can discard the answer before it is read.
 */
static void egress_refuse(int c, const char *status, const char *why) {
  char msg[512];
  size_t body = sizeof "exec-server egress: \n" - 1 + strlen(why);
  int n = snprintf(msg, sizeof msg,
                   "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\nX-Exec-Server-Egress: error\r\n\r\nexec-server egress: %s\n",
                   status, body, why);
  if (n > 0 && n < (int)sizeof msg) { ssize_t ignored = send(c, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT); (void)ignored; }
  shutdown(c, SHUT_WR);
  char sink[4096];
  for (int i = 0; i < 16 && recv(c, sink, sizeof sink, MSG_DONTWAIT) > 0; i++) {}
  close(c);
}

/* A new client: a tunnel to the server's link, greeted with the secret; answered and closed when
 * none can be had. */
static void egress_accept(void) {
  for (;;) {
    int c = accept4(egress_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) return;
    tunnel *t = NULL;
    for (int i = 0; i < MAX_TUNNELS && !t; i++) if (!tunnels[i].used) t = &tunnels[i];
    if (!t) {
      char why[96];
      snprintf(why, sizeof why, "%d connections already open through this proxy", MAX_TUNNELS);
      egress_refuse(c, "429 Too Many Requests", why);
      continue;
    }
    if (!link_set) {
      /* Through the engine: announced, and handed to the `exec-agent tunnel` the server starts. */
      if (conn_out < 0) { egress_refuse(c, "502 Bad Gateway", "the server is not connected"); continue; }
      memset(t, 0, sizeof *t);
      t->used = 2; t->id = next_tunnel_id++; t->since = now_ms(); t->client = c; t->server = -1;
      for (int k = 0; k < 2; k++) t->d[k].pipe[0] = t->d[k].pipe[1] = -1;
      unsigned char b[4];
      put32(b, t->id);
      send_ctl(A_TUNNEL, 0, b, 4);
      continue;
    }
    int s = dial_greeted(egress_pass ? TUNNEL_MAGIC_PASS : TUNNEL_MAGIC);
    if (s < 0) {
      egress_refuse(c, "502 Bad Gateway", "the server cannot be reached");
      continue;
    }
    memset(t, 0, sizeof *t);
    t->used = 1; t->client = c; t->server = s;
    int ok = tdir_init(&t->d[0], c, s) == 0;
    ok = tdir_init(&t->d[1], s, c) == 0 && ok;
    t->mode = egress_pass;
    t->d[0].hold = egress_pass;
    if (!ok) tunnel_close(t);
  }
}

/* Moves what it can of one direction; -1 when the tunnel must end (an error either side). */
static int tdir_pump(tdir *d) {
  /* A short read or write means the source is drained or the destination full for now: the
   * next try would only fail with EAGAIN (poll is level-triggered, nothing is missed). */
  while (!d->eof && !d->stop) {
    if (d->inpipe >= d->cap) break;
    size_t want = d->cap - d->inpipe;
    ssize_t n = splice(d->src, NULL, d->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) { d->inpipe += (size_t)n; if ((size_t)n < want) break; continue; }
    if (n == 0) { d->eof = 1; break; }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    return -1;
  }
  while (d->inpipe > 0) {
    size_t want = d->inpipe;
    ssize_t n = splice(d->pipe[0], NULL, d->dst, NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) { d->inpipe -= (size_t)n; d->moved += (unsigned long long)n; if ((size_t)n < want) break; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    return -1;
  }
  if (d->eof && d->inpipe == 0 && !d->shut && !d->hold) {
    /* A pipe (the tunnel process's stdout) says EOF by being closed. */
    if (shutdown(d->dst, SHUT_WR) < 0 && errno == ENOTSOCK) { close(d->dst); d->dst = -1; }
    d->shut = 1;
  }
  return 0;
}

/*
 * An EXAGTUN2 tunnel: the server's first byte is its mode. 'P': relay as any tunnel (a refusal,
 * or a relay in the server). 'F': the server's relay (`exec-agent relay take`, on the host)
 * takes the client's socket itself and splices it to the destination, so the bytes of the
 * connection cross neither this agent nor the link. What was read from the client before is
 * delivered first, then the socket goes with one byte 'F' (SCM_RIGHTS) and the tunnel is done.
 * Only the client's socket of the container's own network namespace leaves the container;
 * nothing of the host's comes in. 1: the mode was read; 0: not yet; -1: the tunnel must end.
 */
static int tunnel_mode(tunnel *t) {
  char b;
  ssize_t n = recv(t->server, &b, 1, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
  if (n == 0 || (b != 'P' && b != 'F')) return -1;
  t->d[0].hold = b == 'F'; /* handing over: the client's end goes with its socket */
  t->d[0].stop = b == 'F';
  t->mode = b == 'F' ? 2 : 0;
  return 1;
}

/* Sends the one byte `byte` with descriptor `fd` attached (SCM_RIGHTS) on the unix socket `sock`:
 * what sendmsg answers. */
static ssize_t send_with_fd(int sock, char byte, int fd, int flags) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = { &byte, 1 };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET; cm->cmsg_type = SCM_RIGHTS; cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  return sendmsg(sock, &m, MSG_NOSIGNAL | flags);
}

/* Sends the client's socket to the server's relay: 1 sent, 0 try again when writable, -1 failed. */
static int tunnel_pass(tunnel *t) {
  ssize_t n = send_with_fd(t->server, 'F', t->client, MSG_DONTWAIT);
  if (n == 1) return 1;
  return n < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
}

static void tunnel_pump(tunnel *t) {
  if (t->used != 1) return;
  if (t->mode == 1 && tunnel_mode(t) < 0) { tunnel_close(t); return; }
  if (tdir_pump(&t->d[0]) < 0) { tunnel_close(t); return; }
  if (t->mode == 2) {
    /* Handing over: the client's bytes already read go first, then its socket. */
    if (t->d[0].inpipe == 0 && tunnel_pass(t) != 0) tunnel_close(t);
    return;
  }
  if (t->mode == 0 && tdir_pump(&t->d[1]) < 0) { tunnel_close(t); return; }
  if (t->d[0].shut && t->d[1].shut) tunnel_close(t);
}

/* Side k of a tunnel (0: the client, 1: the server): its fd and the events it waits for, or -1
 * when nothing is left to do there (so a hung-up socket is not polled again and again). */
static int side_fd(tunnel *t, int k, short *ev) {
  tdir *out = &t->d[k], *in = &t->d[1 - k];
  *ev = 0;
  if (t->mode == 2) { /* handing over: only the server's side, to write */
    *ev = POLLOUT;
    return k == 0 ? -1 : t->server;
  }
  if (t->mode == 1 && k == 0 && out->eof) return -1; /* a hung-up client waits for the mode */
  if (out->eof && in->shut) return -1;
  if (!out->eof && !out->stop && out->inpipe < out->cap) *ev |= POLLIN;
  if (in->inpipe > 0) *ev |= POLLOUT;
  return k == 0 ? t->client : t->server;
}

/* Side k hung up or failed with nothing left to read: what it sent is complete, what was bound
 * for it cannot be delivered. The other direction drains on (a download outlives its request). */
static void side_hup(tunnel *t, int k) {
  tdir *out = &t->d[k], *in = &t->d[1 - k];
  out->eof = 1;
  in->eof = 1; in->inpipe = 0; in->shut = 1;
}

/* The poll entries of the egress listener and the tunnels; returns how many were added. */
static int egress_pollfds(struct pollfd *pf, int *which) {
  int n = 0;
  if (egress_fd >= 0) { pf[n] = (struct pollfd){ egress_fd, POLLIN, 0 }; which[n++] = -6; }
  for (int i = 0; i < MAX_TUNNELS; i++) {
    tunnel *t = &tunnels[i];
    if (t->used == 2 && now_ms() - t->since > PENDING_MS) tunnel_close(t); /* never claimed */
    if (t->used != 1) continue;
    for (int k = 0; k < 2; k++) {
      short ev;
      int fd = side_fd(t, k, &ev);
      if (fd < 0) continue;
      pf[n] = (struct pollfd){ fd, ev, 0 };
      which[n++] = -100 - (i * 2 + k);
    }
  }
  return n;
}

static void egress_event(int which, short revents) {
  if (which == -6) { egress_accept(); return; }
  int i = (-100 - which) / 2, k = (-100 - which) % 2;
  tunnel *t = &tunnels[i];
  tunnel_pump(t);
  if (t->used == 1 && t->mode == 0 && (revents & (POLLERR | POLLHUP)) && !(revents & POLLIN)) {
    side_hup(t, k);
    tunnel_pump(t);
  }
}

/* `exec-agent tunnel` asks for pending tunnel `id` on the daemon's socket: its client socket is
 * passed over (SCM_RIGHTS) and the daemon forgets it. */
static void egress_hand_over(int c) {
  unsigned char b[4];
  if (recv(c, b, 4, MSG_WAITALL) != 4) return;
  uint32_t id = get32(b);
  for (int i = 0; i < MAX_TUNNELS; i++) {
    tunnel *t = &tunnels[i];
    if (t->used != 2 || t->id != id) continue;
    ssize_t ignored = send_with_fd(c, 'k', t->client, 0); (void)ignored;
    tunnel_close(t);
    return;
  }
}

/* `exec-agent tunnel SOCKET ID`: takes pending tunnel ID's client and relays it to stdin/stdout. */
static int tunnel_main(const char *path, const char *id_text) {
  int s = connect_socket(path);
  if (s < 0) { fprintf(stderr, "exec-agent: no daemon on %s\n", path); return 70; }
  unsigned char msg[5] = { 't' };
  put32(msg + 1, (uint32_t)strtoul(id_text, NULL, 10));
  if (send(s, msg, 5, MSG_NOSIGNAL) != 5) return 70;
  char byte = 0;
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec iov = { &byte, 1 };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  if (recvmsg(s, &m, MSG_CMSG_CLOEXEC) <= 0 || !CMSG_FIRSTHDR(&m)) { fprintf(stderr, "exec-agent: no tunnel %s\n", id_text); return 70; }
  int c;
  memcpy(&c, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof c);
  close(s);
  signal(SIGPIPE, SIG_IGN);
  set_nonblock(0); set_nonblock(1); set_nonblock(c);
  tunnel t = { .used = 1, .client = c, .server = -1 };
  if (tdir_init(&t.d[0], c, 1) < 0 || tdir_init(&t.d[1], 0, c) < 0) return 70;
  while (!(t.d[0].shut && t.d[1].shut)) {
    struct pollfd pf[3];
    int n = 0;
    short cev = 0;
    if (!t.d[0].eof && t.d[0].inpipe < t.d[0].cap) cev |= POLLIN;
    if (t.d[1].inpipe > 0) cev |= POLLOUT;
    pf[n++] = (struct pollfd){ t.d[0].eof && t.d[1].shut ? -1 : c, cev, 0 };
    if (!t.d[1].eof && t.d[1].inpipe < t.d[1].cap) pf[n++] = (struct pollfd){ 0, POLLIN, 0 };
    if (t.d[0].inpipe > 0 && t.d[0].dst >= 0) pf[n++] = (struct pollfd){ t.d[0].dst, POLLOUT, 0 };
    if (poll(pf, (nfds_t)n, -1) < 0 && errno != EINTR) return 70;
    if (tdir_pump(&t.d[0]) < 0 || tdir_pump(&t.d[1]) < 0) break;
    if ((pf[0].revents & (POLLERR | POLLHUP)) && !(pf[0].revents & POLLIN)) side_hup(&t, 0);
  }
  return 0;
}

/*
 * `exec-agent egress-wrap PORT LINK -- CMD...` (the local backend, src/backends/local/local-egress.ts):
 * runs CMD inside a bubblewrap sandbox's own network namespace with the session's proxy on
 * 127.0.0.1:PORT there, tunnelled to the server's socket LINK with the secret given in
 * $EXEC_SERVER_EGRESS_SECRET (removed before CMD runs). When another command of the same
 * sandbox already serves the port, CMD simply runs. Exits as CMD does (its code, or its signal).
 */
static int egress_wrap_main(int argc, char **argv) {
  if (argc < 6 || strcmp(argv[4], "--") != 0) { fprintf(stderr, "usage: exec-agent egress-wrap PORT LINK -- CMD...\n"); return 2; }
  int port = atoi(argv[2]);
  char **cmd = argv + 5;
  const char *hex = getenv("EXEC_SERVER_EGRESS_SECRET");
  int ok = hex && strlen(hex) == 2 * SECRET_LEN && strlen(argv[3]) < sizeof link_path;
  for (int i = 0; ok && i < SECRET_LEN; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) ok = 0;
    link_secret[i] = (unsigned char)v;
  }
  unsetenv("EXEC_SERVER_EGRESS_SECRET");
  if (ok) { snprintf(link_path, sizeof link_path, "%s", argv[3]); link_set = 1; }
  if (!ok || egress_listen(port) != 0) {
    execvp(cmd[0], cmd);
    fprintf(stderr, "exec-server: %s: %s\n", cmd[0], strerror(errno));
    return 127;
  }
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  pid_t pid = fork();
  if (pid == 0) {
    sigprocmask(SIG_UNBLOCK, &chld, NULL);
    close(egress_fd);
    execvp(cmd[0], cmd);
    fprintf(stderr, "exec-server: %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
  }
  if (pid < 0) return 70;
  /* The command's group gets the signals; the relay outlives none of them but SIGKILL. */
  int ignored[] = { SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE };
  for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) signal(ignored[i], SIG_IGN);
  int status = 0;
  for (;;) {
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    struct pollfd pf[2 + MAX_TUNNELS * 2];
    int which[2 + MAX_TUNNELS * 2];
    int n = egress_pollfds(pf, which);
    pf[n] = (struct pollfd){ sfd, POLLIN, 0 };
    which[n++] = 0;
    int r = poll(pf, (nfds_t)n, sfd < 0 ? 100 : PENDING_MS);
    for (int k = 0; r > 0 && k < n; k++) {
      if (!pf[k].revents) continue;
      if (which[k] == 0) { struct signalfd_siginfo si; while (read(sfd, &si, sizeof si) > 0) {} }
      else egress_event(which[k], pf[k].revents);
    }
  }
  if (WIFSIGNALED(status)) { signal(WTERMSIG(status), SIG_DFL); kill(getpid(), WTERMSIG(status)); }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 70;
}
