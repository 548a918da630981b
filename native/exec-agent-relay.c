/*
 * `exec-agent relayd`: the server's side of egress connections (src/egress/native-relay.ts;
 * docs/architecture.md, "Egress"), one process per session's proxy, started at its first
 * connection and fed by the server over its Node IPC channel (fd $NODE_CHANNEL_FD, JSON lines).
 * Included by exec-agent.c after exec-agent-egress.c, whose splice pump it uses. Why one
 * long-lived process rather than one per connection: starting a process from the server forks
 * it, and that costs time in proportion to the server's memory (tens of ms at a few hundred MB).
 * Why one per session rather than one per server: the client sockets come from the session's
 * agent, which its tenant may replace; such a socket can be made blocking behind the relay's
 * back (the flag belongs to the shared file), and a relay that blocks then stalls only the
 * connections of that session.
 *
 * For each connection the server decided and connected, it sends two sockets, each as a
 * `NODE_HANDLE` message (answered NODE_HANDLE_ACK): {"relay":ID,"part":"client","take":0|1} with
 * the session's tunnel, and {"relay":ID,"part":"upstream","early":"HEX"} with the destination.
 *
 *   take 0   relays the tunnel and the destination both ways (`early` was already written).
 *   take 1   the tunnel greeted EXAGTUN2 and the server wrote the mode byte 'F' on it: forwards
 *            to the destination what the agent still sends on the tunnel, takes the client's
 *            socket the agent then passes (SCM_RIGHTS, with one byte 'F'), gives the client
 *            `early` (the CONNECT answer, bytes the server already read from the destination)
 *            and relays the client's socket and the destination both ways: the bytes cross
 *            neither the agent nor the link. A TCP socket is all it accepts (anything else
 *            ends the connection); it only reads, writes and shuts it down.
 *
 * When a connection ends (or {"relay":ID,"stop":1} asks) it answers {"relay":ID,"out":N,"in":M}:
 * the bytes each way, counted here on the host, never by the agent. At most RELAYD_MAX at once.
 * While it lasts, a connection whose bytes moved is reported every PROGRESS_MS at most as
 * {"relay":ID,"out":N,"in":M,"progress":1} (totals so far): should this process die (a crash, an
 * OOM kill), the server still has its bytes, at most PROGRESS_MS old.
 */
#define RELAYD_MAX 128 /* a session has at most 64 connections open at once */
#define TAKE_MS 10000
#define PEND_MAX 65536
#define IPC_LINE_MAX (4 * 1024 * 1024)
#define PROGRESS_MS 500
#ifndef RELAY_SPIN_MS
#define RELAY_SPIN_MS 1
#endif

typedef struct {
  unsigned long long id;
  int take;              /* 1: waiting for the agent's client socket */
  int tun, up;           /* the tunnel (or, once taken, -1), the destination; -1 until sent */
  char *early;           /* bytes for the client first (hex-decoded) */
  size_t early_len;
  char *pend;            /* take: tunnel bytes still to write to the destination */
  size_t pend_len, pend_off;
  unsigned long long first; /* take: tunnel bytes forwarded before the hand-over */
  long long since;
  int relaying;
  tunnel t;
  unsigned long long said_out, said_in; /* the totals last reported */
  long long said_at;     /* when (at first: when the connection came) */
} rconn;

static rconn *rconns[RELAYD_MAX];
static int ipc_fd = -1;

static void ipc_say(const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  for (int off = 0; off < n;) {
    ssize_t w = write(ipc_fd, line + off, (size_t)(n - off));
    if (w > 0) off += (int)w;
    else if (w < 0 && errno == EINTR) continue;
    else if (w < 0 && errno == EAGAIN) { struct pollfd p = { ipc_fd, POLLOUT, 0 }; poll(&p, 1, 1000); }
    else exit(0); /* the server is gone */
  }
}

/* The bytes of a connection so far: to the destination, and to the client (less `early`, which
 * the server read and counts). */
static unsigned long long rconn_out(const rconn *c) { return c->first + c->t.d[0].moved; }
static unsigned long long rconn_in(const rconn *c) {
  return c->relaying && c->t.d[1].moved > c->early_len ? c->t.d[1].moved - c->early_len : 0;
}

static void rconn_end(int i) {
  rconn *c = rconns[i];
  ipc_say("{\"relay\":%llu,\"out\":%llu,\"in\":%llu}\n", c->id, rconn_out(c), rconn_in(c));
  close_fd(&c->tun);
  close_fd(&c->up);
  if (c->relaying) tunnel_close(&c->t);
  else close_fd(&c->t.client);
  free(c->early);
  free(c->pend);
  free(c);
  rconns[i] = NULL;
}

/* The pipes are made, the early bytes laid in the client's direction first: relaying. 0 or -1. */
static int rconn_start(rconn *c, int client) {
  c->t = (tunnel){ .used = 1, .client = client, .server = c->up };
  for (int k = 0; k < 2; k++) c->t.d[k].pipe[0] = c->t.d[k].pipe[1] = -1;
  c->relaying = 1; /* the tunnel owns both sockets now */
  c->up = -1;
  set_nonblock(client);
  if (tdir_init(&c->t.d[0], client, c->t.server) < 0 || tdir_init(&c->t.d[1], c->t.server, client) < 0) return -1;
  if (c->early_len > 0) {
    if (c->early_len > c->t.d[1].cap || write(c->t.d[1].pipe[1], c->early, c->early_len) != (ssize_t)c->early_len)
      return -1;
    c->t.d[1].inpipe = c->early_len;
  }
  return 0;
}

/* Take: reads what the agent sends on the tunnel (its client's last bytes, then its socket).
 * 1: something came, 0: nothing yet, -1: the connection must end. */
static int take_read(rconn *c) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  struct iovec iov = { c->pend, PEND_MAX };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  ssize_t n = recvmsg(c->tun, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
  if (n == 0) return -1;
  c->pend_len = c->pend_off = 0;
  int fd = -1;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < nfd; k++) {
      int f;
      memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof f);
      if (fd < 0) fd = f;
      else close(f);
    }
  }
  /* The marker byte travels with the socket; everything before it is the client's. */
  c->pend_len = fd >= 0 ? (size_t)n - 1 : (size_t)n;
  if (fd < 0) return 1;
  /* The command's connection to the proxy port: a TCP socket, and nothing else is taken. */
  struct stat st;
  int type = 0, proto = 0;
  socklen_t tl = sizeof type, pl = sizeof proto;
  if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode) || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) < 0 || type != SOCK_STREAM || proto != IPPROTO_TCP) {
    close(fd);
    return -1;
  }
  c->take = 0;
  close_fd(&c->tun);
  c->t.client = fd; /* started once the last tunnel bytes are written */
  return 1;
}

/* Moves what it can of one connection; -1 when it ended. `ev`: what poll reported of the client's
 * side and the destination's: a direction is pumped only when its source can be read or its
 * destination written (a splice that can only fail with EAGAIN costs a system call). */
#define ANY_EVENT (POLLIN | POLLOUT | POLLERR | POLLHUP)
static int rconn_step(rconn *c, const short ev[2]) {
  short all[2] = { ANY_EVENT, ANY_EVENT };
  for (;;) {
    if (c->relaying) {
      short in = POLLIN | POLLERR | POLLHUP, out = POLLOUT | POLLERR | POLLHUP;
      if (((ev[0] & in) || (ev[1] & out)) && tdir_pump(&c->t.d[0]) < 0) return -1;
      if (((ev[1] & in) || (ev[0] & out)) && tdir_pump(&c->t.d[1]) < 0) return -1;
      return c->t.d[0].shut && c->t.d[1].shut ? -1 : 0;
    }
    while (c->pend_off < c->pend_len) {
      ssize_t w = send(c->up, c->pend + c->pend_off, c->pend_len - c->pend_off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) { c->pend_off += (size_t)w; c->first += (unsigned long long)w; continue; }
      if (w < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
      return -1;
    }
    if (c->take) {
      if (now_ms() - c->since > TAKE_MS) return -1;
      int r = take_read(c);
      if (r <= 0) return r;
      continue;
    }
    if (rconn_start(c, c->t.client) < 0) return -1;
    ev = all;
  }
}

static unsigned long long json_num(const char *line, const char *key) {
  const char *p = strstr(line, key);
  return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* One line from the server: a socket of a connection, or a stop. */
static void ipc_line(char *line, int fd) {
  unsigned long long id = json_num(line, "\"relay\":");
  int handle = strstr(line, "\"cmd\":\"NODE_HANDLE\"") != NULL;
  if (handle) ipc_say("{\"cmd\":\"NODE_HANDLE_ACK\"}\n");
  int i, slot = -1;
  for (i = 0; i < RELAYD_MAX; i++) {
    if (rconns[i] && rconns[i]->id == id) break;
    if (!rconns[i] && slot < 0) slot = i;
  }
  if (i == RELAYD_MAX && (!handle || fd < 0 || slot < 0 || id == 0)) {
    if (fd >= 0) close(fd);
    if (handle && id != 0) ipc_say("{\"relay\":%llu,\"out\":0,\"in\":0}\n", id);
    return;
  }
  if (i == RELAYD_MAX) {
    rconn *c = calloc(1, sizeof *c);
    if (!c) { close(fd); return; }
    c->id = id; c->tun = c->up = -1; c->t.client = -1; c->since = c->said_at = now_ms();
    rconns[i = slot] = c;
  }
  rconn *c = rconns[i];
  if (!handle) { if (strstr(line, "\"stop\":1")) rconn_end(i); return; }
  if (fd < 0) { rconn_end(i); return; }
  set_nonblock(fd);
  if (strstr(line, "\"part\":\"client\"")) {
    c->tun = fd;
    c->take = json_num(line, "\"take\":") == 1;
  } else {
    c->up = fd;
    const char *h = strstr(line, "\"early\":\"");
    size_t n = h ? strcspn(h + 9, "\"") / 2 : 0;
    c->early = malloc(n + 1);
    for (size_t k = 0; c->early && k < n; k++) {
      unsigned v;
      sscanf(h + 9 + 2 * k, "%2x", &v);
      c->early[k] = (char)v;
    }
    c->early_len = c->early ? n : 0;
  }
  if (c->tun < 0 || c->up < 0) return;
  c->pend = malloc(PEND_MAX);
  if (!c->take) { c->t.client = c->tun; c->tun = -1; }
  short all[2] = { ANY_EVENT, ANY_EVENT };
  if (!c->pend || rconn_step(c, all) < 0) rconn_end(i);
}

/* Reads the IPC channel: JSON lines, each NODE_HANDLE line with the one socket sent with it. */
static void ipc_read(void) {
  static char *buf;
  static size_t len;
  static int fds[64];
  static int nfds;
  if (!buf && !(buf = malloc(IPC_LINE_MAX + 1))) exit(70);
  char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  struct iovec iov = { buf + len, IPC_LINE_MAX - len };
  struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  ssize_t n = recvmsg(ipc_fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0 || len + (size_t)n >= IPC_LINE_MAX) exit(0); /* the server is gone (or broke the framing) */
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    for (size_t k = 0; k < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
      int f;
      memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof f);
      if (nfds < 64) fds[nfds++] = f;
      else close(f);
    }
  }
  len += (size_t)n;
  buf[len] = 0;
  char *start = buf, *nl;
  while ((nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
    *nl = 0;
    int fd = -1;
    if (strstr(start, "\"cmd\":\"NODE_HANDLE\"") && nfds > 0) {
      fd = fds[0];
      memmove(fds, fds + 1, sizeof(int) * (size_t)--nfds);
    }
    ipc_line(start, fd);
    start = nl + 1;
  }
  len -= (size_t)(start - buf);
  memmove(buf, start, len);
}

/* The poll entry of connection i's side k (0: client or tunnel, 1: destination). */
static int rconn_poll(rconn *c, int k, short *ev) {
  *ev = 0;
  if (c->relaying) return side_fd(&c->t, k, ev);
  if (!c->pend) return -1; /* both sockets are not there yet */
  if (c->pend_off < c->pend_len) { *ev = POLLOUT; return k == 1 ? c->up : -1; }
  if (c->take && k == 0) { *ev = POLLIN; return c->tun; }
  return -1;
}

/* The bytes all connections moved so far (whether bytes are flowing). */
static unsigned long long moved_total(void) {
  unsigned long long sum = 0;
  for (int i = 0; i < RELAYD_MAX; i++)
    if (rconns[i]) sum += rconns[i]->first + rconns[i]->t.d[0].moved + rconns[i]->t.d[1].moved;
  return sum;
}

/* Reports the totals of each connection whose bytes moved since its last report and that was
 * last reported (or came) PROGRESS_MS ago or more: a long download is counted as it goes, not only
 * at its end, and a short connection is reported once, when it ends. Returns the ms until the
 * next report is due, -1 when none is. */
static int progress_due(void) {
  long long now = now_ms(), due = -1;
  for (int i = 0; i < RELAYD_MAX; i++) {
    rconn *c = rconns[i];
    if (!c || (rconn_out(c) == c->said_out && rconn_in(c) == c->said_in)) continue;
    long long wait = c->said_at + PROGRESS_MS - now;
    if (wait > 0) {
      if (due < 0 || wait < due) due = wait;
      continue;
    }
    c->said_out = rconn_out(c);
    c->said_in = rconn_in(c);
    c->said_at = now;
    ipc_say("{\"relay\":%llu,\"out\":%llu,\"in\":%llu,\"progress\":1}\n", c->id, c->said_out, c->said_in);
  }
  return (int)due;
}

/* The poll entries: the IPC channel, then the sides of each connection. `waiting`: some
 * connection waits for a socket (its wait is bounded: poll wakes to time it out). */
static int relayd_pollfds(struct pollfd *pf, int *who, int *waiting) {
  int n = 0;
  pf[n] = (struct pollfd){ ipc_fd, POLLIN, 0 }; who[n++] = -1;
  *waiting = 0;
  for (int i = 0; i < RELAYD_MAX; i++) {
    rconn *c = rconns[i];
    if (!c) continue;
    *waiting |= !c->relaying;
    for (int k = 0; k < 2; k++) {
      short ev;
      int fd = rconn_poll(c, k, &ev);
      if (fd >= 0) { pf[n] = (struct pollfd){ fd, ev, 0 }; who[n++] = i * 2 + k; }
    }
  }
  return n;
}

/* Serves what poll reported: the IPC channel first, then each connection. */
static void relayd_events(const struct pollfd *pf, const int *who, int n) {
  static short rev[RELAYD_MAX][2];
  memset(rev, 0, sizeof rev);
  int ipc = 0;
  for (int j = 0; j < n; j++) {
    if (who[j] == -1) ipc = pf[j].revents != 0;
    else rev[who[j] / 2][who[j] % 2] |= pf[j].revents;
  }
  if (ipc) ipc_read();
  for (int i = 0; i < RELAYD_MAX; i++) {
    rconn *c = rconns[i];
    /* (a connection whose sockets are not both there yet waits) */
    if (!c || !c->pend || (c->relaying && !rev[i][0] && !rev[i][1])) continue;
    if (rconn_step(c, rev[i]) < 0) { rconn_end(i); continue; }
    for (int k = 0; k < 2 && rconns[i] && c->relaying; k++) {
      if (!(rev[i][k] & (POLLERR | POLLHUP)) || (rev[i][k] & POLLIN)) continue;
      short all[2] = { ANY_EVENT, ANY_EVENT };
      side_hup(&c->t, k);
      if (rconn_step(c, all) < 0) rconn_end(i);
    }
  }
}

static int relayd_main(void) {
  const char *ch = getenv("NODE_CHANNEL_FD");
  if (!ch) { fprintf(stderr, "exec-agent relayd: run by the server (no NODE_CHANNEL_FD)\n"); return 2; }
  ipc_fd = atoi(ch);
  signal(SIGPIPE, SIG_IGN);
  set_nonblock(ipc_fd);
  static struct pollfd pf[1 + 2 * RELAYD_MAX];
  static int who[1 + 2 * RELAYD_MAX];
  long long flowing_at = 0;
  for (;;) {
    int waiting;
    int n = relayd_pollfds(pf, who, &waiting);
    unsigned long long before = moved_total();
    int due = progress_due();
    /* While bytes flow, poll without sleeping for up to RELAY_SPIN_MS, yielding the CPU: on a
     * virtual machine, waking a halted CPU for each piece costs more than the spin (the agent's
     * output loop measured the same). Idle, it sleeps in poll, woken for a report that is due. */
    int r = 0;
    if (now_ms() - flowing_at <= RELAY_SPIN_MS) {
      long long until = now_ms() + RELAY_SPIN_MS;
      while ((r = poll(pf, (nfds_t)n, 0)) == 0 && now_ms() < until) sched_yield();
    }
    int timeout = waiting ? 1000 : -1;
    if (due >= 0 && (timeout < 0 || due < timeout)) timeout = due;
    if (r == 0) r = poll(pf, (nfds_t)n, timeout);
    if (r < 0 && errno != EINTR) return 70;
    relayd_events(pf, who, n);
    if (moved_total() != before) flowing_at = now_ms();
  }
}
