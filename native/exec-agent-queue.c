/*
 * The exec agent's frames towards the server, queued in order and written with writev, and
 * the (re)dialling of the server's link socket.
 * Included by exec-agent.c (one translation unit: the build stays one compiler call).
 */
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
