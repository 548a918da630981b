/*
 * cloexec_from: shared by the native helpers that start a command (pty-relay.c, sandbox-join.c).
 * Every descriptor from `low` up closes at the next exec: a command gets fds 0-2 and nothing the
 * server was started with (a descriptor its parent leaked to it) or opened without CLOEXEC.
 */
#ifndef EXEC_SERVER_CLOEXEC_H
#define EXEC_SERVER_CLOEXEC_H

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void cloexec_from(int low) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, (unsigned)low, ~0U, 4U /* CLOSE_RANGE_CLOEXEC, Linux 5.11 */) == 0) return;
#endif
  long max = sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 1 << 20) max = 1 << 20;
  for (int fd = low; fd < max; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

#endif
