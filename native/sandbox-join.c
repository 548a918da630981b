/*
 * sandbox-join: runs a command inside a kept-warm bubblewrap sandbox (see
 * src/backends/local/warm-sandbox.ts). Does in one exec what `nsenter -m [-n] -r` followed by
 * `setpriv --bounding-set=-all --inh-caps=-all --no-new-privs` and a `cd` inside the sandbox
 * do in three (each exec costs about a millisecond of a 4 ms sandboxed round trip), and enters
 * the directory inside the sandbox, which `nsenter --wd` does not. Built at install time
 * (scripts/build-native.sh); without it every sandboxed command gets its own bwrap.
 *
 *   sandbox-join HOLDER_PID MNT_NS NET_NS|- CWD -- PROGRAM [ARG...]
 *   sandbox-join --hold      (the holder itself, run by bwrap inside the sandbox)
 *
 * As the holder it marks itself non-dumpable, says "ready" and waits for EOF on stdin: a
 * sandboxed command of this or another session (same uid, no pid namespace) can then neither
 * ptrace it nor open its /proc entries to borrow a wider sandbox.
 *
 * MNT_NS and NET_NS are the holder's namespace ids as bwrap reported them (`-`: keep ours): a
 * holder that is gone and whose pid was reused refuses the join instead of lending another
 * process's namespaces. The order matters: the holder's root is opened before entering its mount namespace (the
 * path /proc/PID/root is resolved in ours), the directory is changed after the chroot so that
 * CWD and every relative path resolve through the sandbox's mounts, and capabilities are
 * dropped last, after the namespace and chroot calls that need them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXIT_SETUP 125

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

static int hold(void) {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die("cannot set", "non-dumpable");
  if (write(1, "ready\n", 6) != 6) die("cannot write", "ready");
  char buf[256];
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--hold") == 0) return hold();
  if (argc < 7 || strcmp(argv[5], "--") != 0 || !digits(argv[1]) || !digits(argv[2]) || (strcmp(argv[3], "-") != 0 && !digits(argv[3]))) {
    fprintf(stderr, "usage: sandbox-join HOLDER_PID MNT_NS NET_NS|- CWD -- PROGRAM [ARG...]\n");
    return EXIT_SETUP;
  }
  const char *pid = argv[1];
  int join_net = strcmp(argv[3], "-") != 0;
  const char *cwd = argv[4];

  int mnt = open_proc(pid, "ns/mnt", O_RDONLY);
  expect_ns(mnt, argv[2], "mount");
  int net = -1;
  if (join_net) {
    net = open_proc(pid, "ns/net", O_RDONLY);
    expect_ns(net, argv[3], "network");
  }
  int root = open_proc(pid, "root", O_RDONLY | O_DIRECTORY);
  /* Still the same process after opening its root (its pid cannot have been reused meanwhile). */
  int again = open_proc(pid, "ns/mnt", O_RDONLY);
  expect_ns(again, argv[2], "mount");
  close(again);

  if (net >= 0 && setns(net, CLONE_NEWNET) != 0) die("cannot join the network namespace of", pid);
  if (setns(mnt, CLONE_NEWNS) != 0) die("cannot join the mount namespace of", pid);
  if (fchdir(root) != 0 || chroot(".") != 0) die("cannot enter the root of", pid);
  if (chdir(cwd) != 0) die("cannot change directory to", cwd);

  /* No capability survives: the bounding set is emptied (so exec cannot grant any back, even
   * to uid 0), then the current sets; no_new_privs blocks setuid binaries. */
  for (int cap = 0; cap <= 63; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die("cannot drop a capability", "");
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("cannot set", "no_new_privs");
  struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &header, data) != 0) die("cannot clear", "capabilities");

  execvp(argv[6], argv + 6);
  int err = errno;
  fprintf(stderr, "sandbox-join: cannot run %s: %s\n", argv[6], strerror(err));
  return err == ENOENT ? 127 : 126;
}
