/*
 * Frames from the server: hello, spawn, stdin, signals, acknowledgements, the process list
 * (replay) and the egress proxy, and the reading of whole frames off the connection.
 * Included by exec-agent.c (one translation unit: the build stays one compiler call).
 */
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

static void handle_hello(unsigned char *pl, uint32_t len) {
  if (len < 12) { send_text(A_ERROR, 0, "malformed hello"); return; }
  uint32_t version = get32(pl);
  if (version != PROTOCOL_VERSION) {
    send_text(A_ERROR, 0, "unsupported protocol version %u (agent speaks %d)", version, PROTOCOL_VERSION);
    detaching = 1;
    return;
  }
  uint32_t r = get32(pl + 4), w = get32(pl + 8), flags = len >= 16 ? get32(pl + 12) : 0;
  if (r >= 1024 && r <= 256u * 1024 * 1024) retention = r;
  if (w >= 64 * 1024 && w <= 64u * 1024 * 1024) window_bytes = w;
  no_pin = !(flags & HELLO_PTY_PIN) || !pin_capable;
  int n = 0;
  for (int i = 0; i < MAX_PROCS; i++) n += procs[i].used;
  long long idle = wall_ms() - noted_at;
  send_text(A_HELLO, 0, "version=%d\npid=%d\nprocesses=%d\nidle=%lld\n", PROTOCOL_VERSION, (int)getpid(), n,
            idle > 0 ? idle : 0);
  link_backoff_ms = 0; /* a server answered: the next break is dialled again at once */
}

/* LIST: each record, its retained output replayed, then LIST_END. */
static void handle_list(void) {
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
}

/* EGRESS: u16 port: the session's proxy listens on 127.0.0.1:port (exec-agent-egress.c); then an
 * optional u8 of flags: 1, the server's relay takes client sockets (EXAGTUN2 tunnels). */
static void handle_egress(uint32_t handle, unsigned char *pl, uint32_t len) {
  int port = len >= 2 ? pl[0] | pl[1] << 8 : 0;
  int e = port > 0 ? egress_listen(port) : EINVAL;
  if (!e) egress_pass = len >= 3 && (pl[2] & 1) && link_set;
  if (e) send_text(A_ERROR, handle, "egress proxy on 127.0.0.1:%d: %s", port, e == ENOTCONN ? "the agent has no link to carry tunnels" : strerror(e));
  else send_text(A_EGRESS, handle, "%d", port);
}

static void take_stdin(proc *p, uint32_t handle, unsigned char *pl, uint32_t len) {
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
}

/* ACK: (seq, end offset) pairs; the end is credit, a non-zero seq also a mark for a replay. */
static void take_acks(proc *p, unsigned char *pl, uint32_t len) {
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
}

/* The frames about one process. */
static void handle_proc_frame(proc *p, int type, uint32_t handle, unsigned char *pl, uint32_t len) {
  switch (type) {
  case S_STDIN: take_stdin(p, handle, pl, len); return;
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
  case S_ACK: take_acks(p, pl, len); return;
  case S_PAUSE: p->paused = 1; return;
  case S_RESUME: p->paused = 0; return;
  case S_FORGET:
    if (!p->exited) { signal_session(p->pid, SIGKILL); p->forgotten = 1; return; } /* freed once reaped */
    free_proc(p);
    return;
  }
}

static void handle_frame(int type, uint32_t handle, unsigned char *pl, uint32_t len) {
  switch (type) {
  case S_HELLO: handle_hello(pl, len); return;
  case S_SPAWN: do_spawn(handle, pl, len); return;
  case S_LIST: handle_list(); return;
  case S_DETACH: detaching = 1; return;
  case S_EGRESS: handle_egress(handle, pl, len); return;
  case S_NOTE: noted_at = wall_ms(); return;
  default: break;
  }
  if (type < S_HELLO || type > S_NOTE) { send_text(A_ERROR, handle, "unknown frame type %d", type); return; }
  proc *p = handle ? find(handle) : NULL;
  if (!p) {
    if (type != S_ACK && type != S_FORGET) send_text(A_ERROR, handle, "unknown process handle %u", handle);
    return;
  }
  handle_proc_frame(p, type, handle, pl, len);
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
