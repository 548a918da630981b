/*
 * `exec-agent relay [take]`: the server's side of an egress connection (src/egress/native-relay.ts;
 * docs/architecture.md, "Egress"), run on the server's host once the server decided and connected
 * the destination. Included by exec-agent.c after exec-agent-egress.c, whose splice pump it uses.
 *
 *   relay        relays socket 0 (the session's tunnel) and socket 1 (the destination) both ways.
 *   relay take   the tunnel greeted EXAGTUN2: writes the mode byte 'F' on it, forwards to the
 *                destination what the agent still sends on it, and takes the client's socket
 *                the agent then passes (SCM_RIGHTS, with one byte 'F'). It writes what fd 3
 *                holds (the CONNECT answer, bytes the server already read from the destination)
 *                to the client, then relays the client's socket and the destination both ways:
 *                the bytes of the connection cross neither the agent nor the link. A socket is
 *                all it accepts (anything else ends the relay); it only reads and writes it.
 *
 * Either way it then writes "OUT IN\n" (bytes each way, counted here on the host, never by the
 * agent) on fd 2.
 */
#define TAKE_MS 10000
#define TAKE_FIRST_MAX (1024 * 1024)
#ifndef RELAY_SPIN_MS
#define RELAY_SPIN_MS 1
#endif

/* Writes all of buf to the non-blocking fd, waiting at most TAKE_MS for room each time. 0 or -1. */
static int write_all_fd(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n > 0) { buf += n; len -= (size_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      struct pollfd p = { fd, POLLOUT, 0 };
      if (poll(&p, 1, TAKE_MS) <= 0) return -1;
      continue;
    }
    return -1;
  }
  return 0;
}

/* All of fd 3 (a pipe from the server, closed after its last byte), at most TAKE_FIRST_MAX. */
static char *read_first(size_t *len) {
  char *buf = malloc(TAKE_FIRST_MAX);
  *len = 0;
  while (buf && *len < TAKE_FIRST_MAX) {
    ssize_t n = read(3, buf + *len, TAKE_FIRST_MAX - *len);
    if (n > 0) { *len += (size_t)n; continue; }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) break;
    free(buf);
    return NULL;
  }
  close(3);
  return buf;
}

/* A stream socket, or -1 (closed). */
static int stream_socket(int fd) {
  struct stat st;
  int type = 0;
  socklen_t tl = sizeof type;
  if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
      type == SOCK_STREAM)
    return fd;
  close(fd);
  return -1;
}

/* Asks the agent for its client's socket; bytes that come before it go to the destination
 * (counted in *out). The socket, or -1 (the agent closed, timed out or sent something else). */
static int take_client(unsigned long long *out) {
  if (write_all_fd(0, "F", 1) < 0) return -1;
  static char buf[65536];
  for (;;) {
    struct pollfd p = { 0, POLLIN, 0 };
    int r = poll(&p, 1, TAKE_MS);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { buf, sizeof buf };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
    ssize_t n = recvmsg(0, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return -1;
    int fd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
      size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < nfd; i++) {
        int f;
        memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
        if (fd < 0) fd = f;
        else close(f);
      }
    }
    /* The marker byte travels with the socket; everything before it is the client's. */
    size_t data = fd >= 0 ? (size_t)n - 1 : (size_t)n;
    if (data > 0 && write_all_fd(1, buf, data) < 0) {
      if (fd >= 0) close(fd);
      return -1;
    }
    *out += data;
    if (fd >= 0) return stream_socket(fd);
  }
}

/*
 * The splice pump between `client` and the destination (fd 1) until both directions ended.
 * While bytes flow it polls without sleeping for up to RELAY_SPIN_MS, yielding the CPU: on a
 * virtual machine, waking a halted CPU for each piece costs more than the spin (the agent's
 * output loop measured the same). An idle connection sleeps in poll.
 */
static void relay_pump(tunnel *t) {
  long long flowing_at = now_ms();
  while (!(t->d[0].shut && t->d[1].shut)) {
    struct pollfd pf[2];
    for (int k = 0; k < 2; k++) {
      short ev;
      int fd = side_fd(t, k, &ev);
      pf[k] = (struct pollfd){ fd, ev, 0 };
    }
    unsigned long long before = t->d[0].moved + t->d[1].moved;
    int r = 0;
    if (now_ms() - flowing_at <= RELAY_SPIN_MS) {
      long long until = now_ms() + RELAY_SPIN_MS;
      while ((r = poll(pf, 2, 0)) == 0 && now_ms() < until) sched_yield();
    }
    if (r == 0) r = poll(pf, 2, -1);
    if (r < 0 && errno != EINTR) break;
    if (tdir_pump(&t->d[0]) < 0 || tdir_pump(&t->d[1]) < 0) break;
    for (int k = 0; k < 2; k++)
      if ((pf[k].revents & (POLLERR | POLLHUP)) && !(pf[k].revents & POLLIN)) side_hup(t, k);
    if (t->d[0].moved + t->d[1].moved != before) flowing_at = now_ms();
  }
}

static int relay_main(int take) {
  signal(SIGPIPE, SIG_IGN);
  unsigned long long first = 0;
  int client = 0;
  if (take) {
    size_t len = 0;
    char *early = read_first(&len);
    set_nonblock(0); set_nonblock(1);
    client = early ? take_client(&first) : -1;
    if (client >= 0) set_nonblock(client);
    if (client >= 0 && write_all_fd(client, early, len) < 0) close_fd(&client);
    free(early);
    close(0); /* the tunnel is done: the agent let it go with its client */
    if (client < 0) {
      dprintf(2, "%llu 0\n", first);
      return 0;
    }
  }
  set_nonblock(client); set_nonblock(1);
  tunnel t = { .used = 1, .client = client, .server = 1 };
  if (tdir_init(&t.d[0], client, 1) < 0 || tdir_init(&t.d[1], 1, client) < 0) return 70;
  relay_pump(&t);
  dprintf(2, "%llu %llu\n", first + t.d[0].moved, t.d[1].moved);
  return 0;
}
