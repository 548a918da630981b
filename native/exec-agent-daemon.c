/*
 * The daemon: its poll loop, attach connections, reaping and exit reports, and the client side
 * of `attach` and `start`.
 * Included by exec-agent.c (one translation unit: the build stays one compiler call).
 */
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

/* A pinned terminal's session gets its CPUs back once its output has been quiet for
 * UNPIN_QUIET_US, or its process is gone; returns the ms until that is due (or -1). */
static int unpin_due(void) {
  if (!pinned) return -1;
  proc *p = find(pinned_handle);
  long long left = p && !p->reported ? p->last_data + UNPIN_QUIET_US / 1000 - now_ms() : 0;
  if (left > 0) return (int)left;
  unpin(pinned_sid);
  return -1;
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
    int timeout = due_exits(), unpin_in = unpin_due();
    if (unpin_in >= 0 && (timeout < 0 || unpin_in < timeout)) timeout = unpin_in;
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
  pin_capable = pin_init();
  noted_at = wall_ms();
  no_pin = 1; /* until a server's hello asks for it */
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
