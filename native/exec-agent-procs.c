/*
 * The exec agent's process records: output read into retention and the queue, exits
 * reported, records freed.
 * Included by exec-agent.c (one translation unit: the build stays one compiler call).
 */
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
  if (p->pty && pin_when_fast(&p->pace, p->fds[i], read_us, n)) { pinned_handle = p->handle; pinned_sid = p->pid; }
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

