/*
 * pty-relay's keeper: the command and what it leaves running, reaped and, when the server
 * goes, killed in passes; the control lines from the server.
 * Included by pty-relay.c (one translation unit, as the other native helpers).
 */
/* One pass over /proc: SIGKILL to every process below `root`; how many were found. A process
 * with a fatal signal pending cannot fork any more, so a pass leaves only children forked while
 * it ran. */
static int kill_tree_pass(pid_t root) {
  size_t cap = 1024, n = 0;
  pid_t *pids = malloc(cap * sizeof *pids), *ppids = malloc(cap * sizeof *ppids);
  if (!pids || !ppids) {
    free(pids);
    free(ppids);
    return 0;
  }
  DIR *proc = opendir("/proc");
  struct dirent *d;
  while (proc && (d = readdir(proc)) != NULL) {
    pid_t p = (pid_t)atoi(d->d_name);
    if (p <= 0) continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = '\0';
    char *paren = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    int ppid;
    char state;
    if (!paren || sscanf(paren + 1, " %c %d", &state, &ppid) != 2) continue;
    if (state == 'Z') ppid = -1; /* ended already: nothing to kill, its children are handed on */
    if (n == cap) {
      cap *= 2;
      pid_t *a = realloc(pids, cap * sizeof *pids), *b = a ? realloc(ppids, cap * sizeof *ppids) : NULL;
      if (a) pids = a;
      if (!a || !b) break;
      ppids = b;
    }
    pids[n] = p;
    ppids[n++] = (pid_t)ppid;
  }
  if (proc) closedir(proc);
  /* Mark descendants until nothing changes; `mark` holds 1 for processes below root. */
  char *mark = calloc(n ? n : 1, 1);
  int found = 0, changed = 1;
  while (mark && changed) {
    changed = 0;
    for (size_t i = 0; i < n; i++) {
      if (mark[i]) continue;
      int below = ppids[i] == root;
      for (size_t j = 0; !below && j < n; j++) below = mark[j] && pids[j] == ppids[i];
      if (below) {
        mark[i] = 1;
        changed = 1;
        kill(pids[i], SIGKILL);
        found++;
      }
    }
  }
  free(mark);
  free(pids);
  free(ppids);
  return found;
}

/* Whether any child (the command, or a leftover handed to us) is still there, exited or not. */
static int have_children(void) {
  siginfo_t info;
  memset(&info, 0, sizeof info);
  return waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

/* Reaps what has ended, reporting the command's own end once; how many were reaped. */
static int reap(pid_t cmd, int *reaped, long long *exited_at) {
  int status, count = 0;
  pid_t w;
  while ((w = waitpid(-1, &status, WNOHANG)) > 0) {
    count++;
    if (w != cmd || *reaped) continue;
    *reaped = 1;
    if (exited_at) *exited_at = now_us();
    if (WIFSIGNALED(status)) ctl_say("signal %ld\n", WTERMSIG(status), NULL);
    else ctl_say("exit %ld\n", WEXITSTATUS(status), NULL);
  }
  return count;
}

/* Kills everything below the relay and reaps it (the command's end is reported as usual). */
static void kill_tree(pid_t cmd, int *reaped, long long *exited_at) {
  pid_t self = getpid();
  for (int quiet = 0; quiet < 3;) {
    int found = kill_tree_pass(self);
    int ended = reap(cmd, reaped, exited_at);
    if (found || ended) quiet = 0;
    else if (!have_children()) quiet++;
    else usleep(1000);
  }
}

/* Reads control lines; returns -1 when the server is gone (EOF, error), else 0. */
static int read_ctl(int master, char *ctl, size_t *ctl_len, size_t size) {
  ssize_t n = read(CTL_FD, ctl + *ctl_len, size - 1 - *ctl_len);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return -1;
  if (n < 0) return 0;
  *ctl_len += (size_t)n;
  char *nl;
  while ((nl = memchr(ctl, '\n', *ctl_len)) != NULL) {
    *nl = '\0';
    int cols, rows;
    if (master >= 0 && sscanf(ctl, "resize %d %d", &cols, &rows) == 2 && cols >= 1 && rows >= 1 && cols <= 65535 && rows <= 65535) {
      struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
      (void)ioctl(master, TIOCSWINSZ, &ws);
    }
    size_t used = (size_t)(nl + 1 - ctl);
    memmove(ctl, nl + 1, *ctl_len - used);
    *ctl_len -= used;
  }
  if (*ctl_len == size - 1) *ctl_len = 0; /* an overlong line: not ours, drop it */
  return 0;
}

/* Drains the signalfd; whether SIGTERM (the server's "end everything") was among its signals.
 * A signal rather than a control line: the relay may be exiting when it is asked, and a
 * write to its closing socket would cost the server the lines still unread on it. */
static int drain_signals(int sigfd) {
  struct signalfd_siginfo si;
  int term = 0;
  while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
    if (si.ssi_signo == SIGTERM) term = 1;
  }
  return term;
}

#include "stdio-pipes.h"

#define DRAIN_AFTER_END_US 500000

/* After the command: holds what it left behind until the server ends it or it ends by itself,
 * moving a pipe-mode command's stdio meanwhile (stdio-pipes.h) until its output is delivered. */
static int keep_leftovers(int sigfd, int reaped, pid_t cmd) {
  char ctl[128];
  size_t ctl_len = 0;
  long long ended_at = 0;
  for (;;) {
    reap(cmd, &reaped, NULL);
    if (reaped && !have_children()) {
      stdio_pipe_end(&stdio_pipes[0]); /* nobody is left to read stdin */
      if (!stdio_pipes_busy()) return 0;
    }
    /* Ended by the server: what is already in the pipes still goes, for a moment at most. */
    if (ended_at && now_us() - ended_at > DRAIN_AFTER_END_US) return 0;
    struct pollfd p[5] = {{.fd = CTL_FD, .events = ended_at ? 0 : POLLIN}, {.fd = sigfd, .events = POLLIN}};
    int n = 2 + stdio_pipes_poll(p + 2);
    if (poll(p, (nfds_t)n, ended_at ? 50 : -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    for (int k = 0; k < 3; k++) stdio_pipe_pump(&stdio_pipes[k]);
    if (ended_at) continue;
    int end = (p[1].revents & POLLIN) && drain_signals(sigfd);
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_ctl(-1, ctl, &ctl_len, sizeof ctl) != 0) end = 1;
    if (end) {
      kill_tree(cmd, &reaped, NULL);
      ended_at = now_us();
    }
  }
}
