/*
 * relay-spawner: starts a local session's process relays (build/pty-relay) so that the server
 * does not have to. Node starts a child by fork() of the whole server, whose cost grows with the
 * server's memory (milliseconds per command at 150 MB); this process is a few hundred KiB, so
 * its fork costs a fraction of that. One runs per session, started once by the server.
 *
 *   relay-spawner SOCKET
 *
 * Requests on stdin: u32 little-endian length, then NUL-terminated fields:
 *   id cwd stdin-token stdout-token stderr-token control-token argc argv... envc env...
 * Each token (32 hex digits, or empty for stdin: /dev/null) names a stream: the spawner connects
 * to SOCKET (the server's private listener), sends the token, and the connection becomes that
 * descriptor (0, 1, 2, 3) of the relay, which runs in a session of its own with the signal mask
 * and dispositions reset, as Node's `spawn(..., { detached: true })` would start it.
 * Replies on stdout, one line each: `spawned ID PID`, `failed ID ERRNO`, and for every relay
 * that ends `exit PID CODE SIGNAL` (CODE or SIGNAL is -1). Exits when stdin ends.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_REQUEST (4 * 1024 * 1024)
#define TOKEN_LEN 32

static const char *sock_path;

static void reply(const char *fmt, long a, long b, long c) {
  char line[96];
  int n = snprintf(line, sizeof line, fmt, a, b, c);
  if (n > 0 && write(1, line, (size_t)n) != n) _exit(0); /* the server is gone */
}

static int read_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, (char *)buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

/* A connection to the server's listener announced by `token`; -1 with errno set. */
static int stream(const char *token) {
  if (strlen(token) != TOKEN_LEN) { errno = EINVAL; return -1; }
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sock_path);
  if (connect(s, (struct sockaddr *)&a, sizeof a) < 0 || write(s, token, TOKEN_LEN) != TOKEN_LEN) {
    int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  return s;
}

/* In the child: descriptors 0-3, a session of its own, a clean signal state, then the relay. */
static void child(int fds[4], int report, const char *cwd, char **argv, char **envp) {
  int high[4];
  for (int i = 0; i < 4; i++) high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
  for (int i = 0; i < 4; i++) if (high[i] < 0 || dup2(high[i], i) < 0) goto fail;
  sigset_t none;
  sigemptyset(&none);
  for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  if (chdir(cwd) < 0) goto fail;
  execve(argv[0], argv, envp);
fail:;
  int e = errno;
  ssize_t ignored = write(report, &e, sizeof e);
  (void)ignored;
  _exit(127);
}

static void spawn_one(char *p, uint32_t len) {
  char *end = p + len, *f[7];
  for (int k = 0; k < 7; k++) {
    if (p >= end) return;
    f[k] = p;
    p += strlen(p) + 1;
  }
  long id = strtol(f[0], NULL, 10), argc = strtol(f[6], NULL, 10);
  if (argc < 1 || argc > 65536) { reply("failed %ld %ld\n", id, EINVAL, 0); return; }
  char **argv = calloc((size_t)argc + 1, sizeof *argv);
  for (long k = 0; k < argc && p < end; k++) { argv[k] = p; p += strlen(p) + 1; }
  long envc = p < end ? strtol(p, NULL, 10) : -1;
  if (p < end) p += strlen(p) + 1;
  if (argv[argc - 1] == NULL || envc < 0 || envc > 65536) { free(argv); reply("failed %ld %ld\n", id, EINVAL, 0); return; }
  char **envp = calloc((size_t)envc + 1, sizeof *envp);
  for (long k = 0; k < envc && p < end; k++) { envp[k] = p; p += strlen(p) + 1; }
  int fds[4] = { -1, -1, -1, -1 }, report[2] = { -1, -1 }, e = 0;
  for (int i = 0; i < 4 && e == 0; i++) {
    fds[i] = i == 0 && f[2][0] == 0 ? open("/dev/null", O_RDONLY | O_CLOEXEC) : stream(f[2 + i]);
    if (fds[i] < 0) e = errno;
  }
  pid_t pid = -1;
  if (e == 0 && pipe2(report, O_CLOEXEC) < 0) e = errno;
  if (e == 0) {
    pid = fork();
    if (pid == 0) child(fds, report[1], f[1], argv, envp);
    if (pid < 0) e = errno;
  }
  if (report[1] >= 0) close(report[1]);
  if (pid > 0) {
    /* The exec closes the pipe; a failure writes its errno first. */
    int why;
    if (read_full(report[0], &why, sizeof why) == 0) {
      e = why;
      waitpid(pid, NULL, 0);
      pid = -1;
    }
  }
  if (report[0] >= 0) close(report[0]);
  for (int i = 0; i < 4; i++) if (fds[i] >= 0) close(fds[i]);
  free(argv);
  free(envp);
  if (pid > 0) reply("spawned %ld %ld\n", id, (long)pid, 0);
  else reply("failed %ld %ld\n", id, e, 0);
}

int main(int argc, char **argv) {
  if (argc != 2 || strlen(argv[1]) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
    fprintf(stderr, "usage: relay-spawner SOCKET\n");
    return 2;
  }
  sock_path = argv[1];
  signal(SIGPIPE, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  char *buf = NULL;
  for (;;) {
    struct pollfd pf[2] = { { 0, POLLIN, 0 }, { sfd, POLLIN, 0 } };
    if (poll(pf, 2, -1) < 0 && errno != EINTR) return 70;
    if (pf[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {}
      int status;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        reply("exit %ld %ld %ld\n", (long)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
              WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    }
    if (pf[0].revents) {
      unsigned char h[4];
      if (read_full(0, h, 4) < 0) return 0;
      uint32_t len = h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
      if (len == 0 || len > MAX_REQUEST) return 2;
      buf = realloc(buf, len + 1);
      if (!buf || read_full(0, buf, len) < 0) return 0;
      buf[len] = 0;
      spawn_one(buf, len);
    }
  }
}
