/*
 * sandbox-join: runs a command inside a kept-warm bubblewrap sandbox (see
 * src/backends/local/warm-sandbox.ts), and drops a sandboxed command to its session's user.
 * Does in one exec what `nsenter -m [-n] -p -r` followed by `setpriv` and a `cd` inside the
 * sandbox do in three (each exec costs about a millisecond of a 4 ms sandboxed round trip), and
 * enters the directory inside the sandbox, which `nsenter --wd` does not. Built at install time
 * (scripts/build-native.sh); without it every sandboxed command gets its own bwrap.
 *
 *   sandbox-join HOLDER_PID MNT_NS NET_NS|- PID_NS USER CWD -- PROGRAM [ARG...]
 *   sandbox-join --as USER CWD -- PROGRAM [ARG...]   (inside a fresh bwrap: become USER, cd, exec)
 *   sandbox-join --hold                          (the holder itself, run by bwrap inside the sandbox)
 *
 * USER is `UID:GID:NPROC` (NPROC `-` for no process limit), or `-` to keep the caller's ids.
 * A session's sandboxed commands run as a user of their own (local-backend.ts): root-only
 * files stay closed to them, they cannot signal or trace another session's processes, and
 * RLIMIT_NPROC, which counts per user, bounds the session's processes (a fork bomb stops at it).
 *
 * The holder marks itself non-dumpable, says "ready" and waits for EOF on stdin. It runs as
 * pid 2 of the sandbox's own PID namespace (bwrap --unshare-pid; bwrap is its init): when it
 * ends, the kernel ends every process of that namespace, so whatever a command left running in
 * the background lives exactly as long as the sandbox, and bwrap's --die-with-parent makes that
 * "as long as the server" too.
 *
 * The namespace ids are the holder's as bwrap reported them: a holder that is gone and whose
 * pid was reused refuses the join instead of lending another process's namespaces. The order
 * matters: the holder's root is opened before entering its mount namespace (the path
 * /proc/PID/root is resolved in ours), the directory is changed after the chroot so that CWD and
 * every relative path resolve through the sandbox's mounts, capabilities are dropped after the
 * namespace and chroot calls that need them. Joining a PID namespace only moves children, so the
 * command is forked: the parent stays outside, waits, and ends the way the command ended (its exit
 * code, or the same signal), which is what the server sees.
 *
 * On a terminal (PTY mode: fd 0 is the terminal and we are its foreground), the command gets a
 * process group of its own and becomes the terminal's foreground: the group the terminal had is
 * the relay's, outside the sandbox's PID namespace, and an interactive dash or busybox sh that
 * gives the terminal back to the group it found at start failed there ("Cannot set tty process
 * group (No such process)") and exited 2 whatever `exit` said. The parent then forwards the
 * signals the server sends its group to the command's group, and the command gets SIGKILL when
 * the parent does (PR_SET_PDEATHSIG), so that signals and kills reach it as before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cloexec.h"

#define EXIT_SETUP 125

/* Where to say whether the program can be run (pty-relay --exec-report), or -1. */
static int report_fd = -1;

static void die(const char *what, const char *arg) {
  fprintf(stderr, "sandbox-join: %s %s: %s\n", what, arg, strerror(errno));
  exit(EXIT_SETUP);
}

static int open_proc(const char *pid, const char *entry, int flags) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%s/%s", pid, entry);
  int fd = open(path, flags | O_CLOEXEC);
  if (fd < 0) die("cannot open", path);
  return fd;
}

static int digits(const char *s) {
  return *s != '\0' && strspn(s, "0123456789") == strlen(s);
}

/* The namespace behind fd must be the one the holder had when it started. */
static void expect_ns(int fd, const char *id, const char *what) {
  struct stat st;
  if (fstat(fd, &st) != 0) die("cannot inspect the namespace", what);
  if (st.st_ino != strtoull(id, NULL, 10)) {
    fprintf(stderr, "sandbox-join: the %s namespace is not the sandbox's (holder gone?)\n", what);
    exit(EXIT_SETUP);
  }
}

struct user {
  int set;
  uid_t uid;
  gid_t gid;
  long nproc; /* -1: no limit */
};

static int parse_user(const char *s, struct user *u) {
  memset(u, 0, sizeof *u);
  u->nproc = -1;
  if (strcmp(s, "-") == 0) return 1;
  unsigned long uid, gid;
  char nproc[24];
  if (sscanf(s, "%lu:%lu:%23s", &uid, &gid, nproc) != 3 || uid == 0 || uid > 0xfffffffe || gid > 0xfffffffe) return 0;
  if (strcmp(nproc, "-") != 0) {
    if (!digits(nproc)) return 0;
    u->nproc = strtol(nproc, NULL, 10);
    if (u->nproc < 1) return 0;
  }
  u->set = 1;
  u->uid = (uid_t)uid;
  u->gid = (gid_t)gid;
  return 1;
}

/* Empties the bounding set, so that exec cannot grant any capability back (needs CAP_SETPCAP:
 * skipped without it, where the caller's bounding set is already narrow). */
static void drop_bounding_set(void) {
  for (int cap = 0; cap <= 63; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      if (errno == EPERM) return;
      die("cannot drop a capability", "");
    }
  }
}

/* Keeps only `keep` (a capability below 32, or -1 for none) in the effective and permitted sets. */
static void keep_capability(int keep) {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (keep >= 0) data[0].effective = data[0].permitted = 1u << keep;
  if (syscall(SYS_capset, &header, data) != 0) die("cannot clear", "capabilities");
}

static void clear_capabilities(void) {
  keep_capability(-1);
}

/* Whether fd 0 is a terminal whose foreground is our process group (PTY mode). Inside a PID
 * namespace that does not hold the group both read 0, and that still means ours. */
static int terminal_foreground(void) {
  return isatty(0) && tcgetpgrp(0) == getpgrp();
}

/* A process group of our own in the terminal's foreground, with an id this PID namespace can
 * name. SIGTTOU blocked: tcsetpgrp from a background group would stop us otherwise. */
static void take_terminal(void) {
  if (setpgid(0, 0) != 0 && errno != EPERM) die("cannot make", "a process group");
  sigset_t ttou, old;
  sigemptyset(&ttou);
  sigaddset(&ttou, SIGTTOU);
  sigprocmask(SIG_BLOCK, &ttou, &old);
  (void)tcsetpgrp(0, getpgrp()); /* best effort: the command runs either way */
  sigprocmask(SIG_SETMASK, &old, NULL);
}

/* The report pipe pty-relay passed (EXEC_SERVER_EXEC_REPORT_FD), kept from the command. */
static void take_report_fd(void) {
  const char *s = getenv("EXEC_SERVER_EXEC_REPORT_FD");
  if (s && digits(s)) {
    report_fd = atoi(s);
    if (fcntl(report_fd, F_SETFD, FD_CLOEXEC) != 0) report_fd = -1;
  }
  unsetenv("EXEC_SERVER_EXEC_REPORT_FD");
}

/* Whether `file` is something we may execute: 0, EACCES (a directory, or no x bit) or ENOENT. */
static int runnable(const char *file) {
  struct stat st;
  if (stat(file, &st) != 0) return errno == ENOENT || errno == ENOTDIR ? ENOENT : errno;
  if (!S_ISREG(st.st_mode) || access(file, X_OK) != 0) return EACCES;
  return 0;
}

/* The errno execvp(file) would fail with for want of the program, searched as execvp does
 * (PATH, a name with a slash as it is); 0 when it is there to run. */
static int exec_problem(const char *file) {
  if (*file == '\0') return ENOENT;
  if (strchr(file, '/')) return runnable(file);
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/bin:/usr/bin";
  int denied = 0;
  for (const char *p = path;; ) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    char full[4096];
    if (snprintf(full, sizeof full, "%.*s%s%s", (int)len, p, len ? "/" : "", file) < (int)sizeof full) {
      int e = runnable(full);
      if (e == 0) return 0;
      if (e == EACCES) denied = 1;
    }
    if (!colon) break;
    p = colon + 1;
  }
  return denied ? EACCES : ENOENT;
}

/* Becomes the session's user (if any) with no capability and no way to gain one, changes to
 * `cwd` (if given: as that user, since a workspace may be closed to a root without capabilities),
 * then execs. `orphan_signal`: the signal to get when the parent ends (0: none), set after the
 * change of user, which clears it. */
static int become_and_exec(const struct user *u, const char *cwd, char **argv, int orphan_signal) {
  drop_bounding_set();
  if (u->set) {
    if (u->nproc > 0) {
      struct rlimit rl = {(rlim_t)u->nproc, (rlim_t)u->nproc};
      if (setrlimit(RLIMIT_NPROC, &rl) != 0) die("cannot set", "RLIMIT_NPROC");
    }
    if (setgroups(0, NULL) != 0) die("cannot clear", "supplementary groups");
    if (setresgid(u->gid, u->gid, u->gid) != 0) die("cannot set", "the group id");
    if (setresuid(u->uid, u->uid, u->uid) != 0) die("cannot set", "the user id");
  }
  if (orphan_signal && prctl(PR_SET_PDEATHSIG, orphan_signal, 0, 0, 0) != 0) die("cannot set", "the parent-death signal");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("cannot set", "no_new_privs");
  clear_capabilities();
  if (cwd && chdir(cwd) != 0) die("cannot change directory to", cwd);
  cloexec_from(3);
  if (report_fd >= 0) {
    /* Said before the exec: a program that is missing or not executable fails the start. */
    int e = exec_problem(argv[0]);
    (void)!write(report_fd, &e, sizeof e);
    if (e != 0) return e == ENOENT ? 127 : 126;
  }
  execvp(argv[0], argv);
  int err = errno;
  fprintf(stderr, "sandbox-join: cannot run %s: %s\n", argv[0], strerror(err));
  return err == ENOENT ? 127 : 126;
}

/* Waits for `child`, forwarding every signal but SIGCHLD to its process group (falling back to
 * the child itself while it has none yet). */
static int wait_forwarding(pid_t child, const sigset_t *all, int *status) {
  if (waitpid(child, status, WNOHANG) == child) return 0;
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(all, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (sig == SIGCHLD) {
      pid_t done = waitpid(child, status, WNOHANG);
      if (done == child) return 0;
      if (done < 0 && errno != EINTR) return -1;
    } else if (kill(-child, sig) != 0) {
      (void)kill(child, sig);
    }
  }
}

/* Outside the namespace: wait for the command and end the way it ended. Signals sent to the
 * process group reach the command directly; blocked here, they cannot end the parent first.
 * `forward`: the command has a group of its own (take_terminal), so they are passed on to it,
 * with CAP_KILL kept for that alone (the command runs as another user). */
static int wait_and_mirror(pid_t child, int forward) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, NULL);
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  /* Only the command may hold its output open: the server sees EOF when the command is done. */
  for (int fd = 0; fd <= 2; fd++) {
    if (devnull >= 0) dup2(devnull, fd);
    else close(fd);
  }
  drop_bounding_set();
  int status;
  if (forward) {
    (void)setpgid(child, child); /* the child does it too: whichever runs first */
    keep_capability(CAP_KILL);
    if (wait_forwarding(child, &all, &status) != 0) return EXIT_SETUP;
  } else {
    clear_capabilities();
    while (waitpid(child, &status, 0) < 0) {
      if (errno != EINTR) return EXIT_SETUP;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  int sig = WTERMSIG(status);
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none); /* the command's core (if any) was written already */
  signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigprocmask(SIG_UNBLOCK, &one, NULL);
  raise(sig);
  return 128 + sig;
}

static int hold(void) {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die("cannot set", "non-dumpable");
  /* It lives in the sandbox as long as the session: it keeps nothing but its stdio. */
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
#endif
    for (int fd = 3; fd < 1024; fd++) close(fd);
  if (write(1, "ready\n", 6) != 6) die("cannot write", "ready");
  char buf[256];
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}

static int usage(void) {
  fprintf(stderr,
          "usage: sandbox-join HOLDER_PID MNT_NS NET_NS|- PID_NS USER CWD -- PROGRAM [ARG...]\n"
          "       sandbox-join --as USER CWD -- PROGRAM [ARG...]\n"
          "       sandbox-join --hold\n");
  return EXIT_SETUP;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--hold") == 0) return hold();
  take_report_fd();
  struct user user;
  if (argc >= 6 && strcmp(argv[1], "--as") == 0) {
    if (!parse_user(argv[2], &user) || strcmp(argv[4], "--") != 0) return usage();
    if (terminal_foreground()) take_terminal();
    return become_and_exec(&user, argv[3], argv + 5, 0);
  }
  if (argc < 9 || strcmp(argv[7], "--") != 0 || !digits(argv[1]) || !digits(argv[2]) || (strcmp(argv[3], "-") != 0 && !digits(argv[3])) || !digits(argv[4]) ||
      !parse_user(argv[5], &user)) {
    return usage();
  }
  const char *pid = argv[1];
  int join_net = strcmp(argv[3], "-") != 0;
  const char *cwd = argv[6];

  int mnt = open_proc(pid, "ns/mnt", O_RDONLY);
  expect_ns(mnt, argv[2], "mount");
  int net = -1;
  if (join_net) {
    net = open_proc(pid, "ns/net", O_RDONLY);
    expect_ns(net, argv[3], "network");
  }
  int pidns = open_proc(pid, "ns/pid", O_RDONLY);
  expect_ns(pidns, argv[4], "PID");
  int root = open_proc(pid, "root", O_RDONLY | O_DIRECTORY);
  /* Still the same process after opening its root (its pid cannot have been reused meanwhile). */
  int again = open_proc(pid, "ns/mnt", O_RDONLY);
  expect_ns(again, argv[2], "mount");
  close(again);

  if (net >= 0 && setns(net, CLONE_NEWNET) != 0) die("cannot join the network namespace of", pid);
  if (setns(mnt, CLONE_NEWNS) != 0) die("cannot join the mount namespace of", pid);
  if (fchdir(root) != 0 || chroot(".") != 0) die("cannot enter the root of", pid);
  if (chdir(cwd) != 0) die("cannot change directory to", cwd);
  if (setns(pidns, CLONE_NEWPID) != 0) die("cannot join the PID namespace of", pid);
  close(mnt);
  close(pidns);
  close(root);
  if (net >= 0) close(net);

  int tty = terminal_foreground();
  /* Blocked before the fork: a SIGCHLD or a signal to forward must not be lost before the wait. */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  pid_t child = fork();
  if (child < 0) die("cannot start the command in the sandbox of", pid); /* ENOMEM: the namespace has ended */
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (tty) take_terminal();
    return become_and_exec(&user, NULL, argv + 8, tty ? SIGKILL : 0);
  }
  if (report_fd >= 0) close(report_fd);
  return wait_and_mirror(child, tty);
}
