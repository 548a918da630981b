/*
 * pty-relay's start of the command: the fork, the launcher's exec report, the start
 * reported to the server, and pipe mode.
 * Included by pty-relay.c (one translation unit, as the other native helpers).
 */
/* --exec-report (see the top): the pipe the launcher reports on, made before the fork. */
static int exec_report = 0;
static int report_pipe[2] = {-1, -1};

static void report_prepare(void) {
  if (exec_report && pipe2(report_pipe, O_CLOEXEC) < 0) die("pipe2");
}

/* In the child, before its exec: the launcher inherits the write end and learns its number. */
static void report_pass(void) {
  if (report_pipe[1] < 0) return;
  char num[16];
  snprintf(num, sizeof num, "%d", report_pipe[1]);
  if (fcntl(report_pipe[1], F_SETFD, 0) < 0 || setenv("EXEC_SERVER_EXEC_REPORT_FD", num, 1) < 0) return;
}

/* In the relay, once the launcher runs: the errno it reported (0: the program is being run, or
 * the launcher ended without a word, which its exit then tells). */
static int report_wait(void) {
  if (report_pipe[0] < 0) return 0;
  int e = 0;
  size_t got = 0;
  while (got < sizeof e) {
    ssize_t n = read(report_pipe[0], (char *)&e + got, sizeof e - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(report_pipe[0]);
  return got == sizeof e ? e : 0;
}

/* After the fork, in the relay: only the child holds the write end. */
static void report_close_writer(void) {
  if (report_pipe[1] >= 0) close(report_pipe[1]);
  report_pipe[1] = -1;
}

/* In the command's process after the fork: the relay's signal mask undone, fds from 3 closed at
 * exec (the report pipe's end is made inheritable again by report_pass). */
static void child_prepare(const sigset_t *old) {
  sigprocmask(SIG_SETMASK, old, NULL);
  signal(SIGPIPE, SIG_DFL);
  cloexec_from(3);
  report_pass();
}

/* Forks the command's process (prepared by child_prepare) with the pipe its exec errno comes
 * back through; 0 in the child, its pid in the relay. */
static pid_t fork_command(int errpipe[2], const sigset_t *old) {
  if (pipe2(errpipe, O_CLOEXEC) < 0) die("pipe2");
  report_prepare();
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) child_prepare(old);
  return pid;
}

/* In the command's process: its start failed; the errno goes to the relay through `fd`. */
__attribute__((noreturn)) static void child_failed(int fd) {
  int e = errno;
  (void)!write(fd, &e, sizeof e);
  _exit(127);
}

/* In the relay after the fork: whether the command started (its errno pipe closed empty, and
 * the launcher, with --exec-report, reported 0). Says "pid N" or "error ERRNO TEXT" on fd 3. */
static int exec_started(int errpipe[2], pid_t pid) {
  close(errpipe[1]);
  report_close_writer();
  int exec_errno = 0;
  ssize_t n;
  while ((n = read(errpipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {}
  close(errpipe[0]);
  if (n <= 0 && (exec_errno = report_wait()) != 0) n = 1;
  if (n > 0) {
    waitpid(pid, NULL, 0);
    ctl_say("error %ld %s\n", exec_errno, strerror(exec_errno));
    return 0;
  }
  ctl_say("pid %ld\n", pid, NULL);
  return 1;
}

/* Pipe mode: the command runs on the relay's own fd 0-2; the relay only keeps it. */
static int run_pipe(char **cmd, int sigfd, const sigset_t *old) {
  const char *file = cmd[0];
  if (strcmp(cmd[0], "--arg0") == 0 && cmd[1] && cmd[2]) { /* --arg0 NAME FILE ARG...: NAME as argv[0] */
    file = cmd[2];
    cmd[2] = cmd[1];
    cmd += 2;
  }
  stdio_pipes_make();
  int errpipe[2];
  pid_t pid = fork_command(errpipe, old);
  if (pid == 0) {
    stdio_pipes_child();
    if (setsid() >= 0) execvp(file, cmd);
    child_failed(errpipe[1]);
  }
  stdio_pipes_parent();
  if (!exec_started(errpipe, pid)) return 0;
  set_nonblock(CTL_FD);
  return keep_leftovers(sigfd, 0, pid);
}

