#!/usr/bin/env bash
# Starts a Docker engine when none answers, and waits (bounded) until it does.
#
# Used by CI (`.ci/run`) and by developers before `node --test test/docker/*.test.ts`.
# Idempotent: when `docker info` already succeeds it does nothing.
#
# Environment:
#   DOCKERD_LOG          log file of the started daemon (default /tmp/dockerd.log)
#   DOCKERD_WAIT_SECONDS how long to wait for the socket (default 60)
#   DOCKERD_STORAGE      force a storage driver (default: overlay2 when it works, else vfs)
#   DOCKERD_EXTRA_ARGS   appended to the dockerd command line
#   DOCKERD_CONFIG       daemon config file (default /etc/docker/daemon.json)
#
# When runsc (gVisor, Debian's `runsc` package) is installed and no daemon config exists yet,
# one is written that registers it as the runtime `runsc` with `--network=none` (without it,
# runsc cannot start containers in the host's network namespace on many VMs) and turns on
# experimental mode, which checkpoints (session hibernation) need. See docs/docker-backend.md.
set -euo pipefail

LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"
WAIT="${DOCKERD_WAIT_SECONDS:-60}"
SOCK="/var/run/docker.sock"

engine_answers() { timeout 5 docker info >/dev/null 2>&1; }

CONFIG="${DOCKERD_CONFIG:-/etc/docker/daemon.json}"
RUNSC="$(command -v runsc || true)"

# runsc is registered through scripts/runsc-runtime.sh (a second hibernation of a session needs
# it with Debian's runsc), installed where the engine finds it whatever happens to this clone.
RUNTIME_WRAPPER="${RUNSC_RUNTIME_PATH:-/usr/local/libexec/exec-server/runsc-runtime}"
daemon_config() {
  printf '{\n  "experimental": true,\n  "runtimes": { "runsc": { "path": "%s", "runtimeArgs": ["--network=none"] } }\n}\n' "$1"
}
# (Refreshed on every run: a running engine that names it picks up a fix at its next call.)
if [ -n "$RUNSC" ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$(dirname "$RUNTIME_WRAPPER")"
  sed "s|^RUNSC=.*|RUNSC=\"\${EXEC_SERVER_RUNSC:-$RUNSC}\"|" "$(dirname "$0")/runsc-runtime.sh" >"$RUNTIME_WRAPPER.tmp"
  chmod 0755 "$RUNTIME_WRAPPER.tmp"
  mv "$RUNTIME_WRAPPER.tmp" "$RUNTIME_WRAPPER"
fi

if engine_answers; then
  echo "start-dockerd: engine already answers" >&2
  if [ -n "$RUNSC" ] && ! timeout 5 docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    echo "start-dockerd: note: the running engine has no runsc runtime (gVisor tests will fail); see $CONFIG" >&2
  fi
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "start-dockerd: dockerd not installed (apt-get install -y docker.io)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "start-dockerd: must run as root to start dockerd" >&2
  exit 1
fi

# Probe overlayfs: dockerd falls back by itself only in some versions, and an overlay2 that
# mounts but fails later (e.g. on an overlay-backed root) gives confusing errors per container.
pick_storage() {
  if [ -n "${DOCKERD_STORAGE:-}" ]; then echo "$DOCKERD_STORAGE"; return; fi
  local d; d="$(mktemp -d /tmp/ovl-probe.XXXXXX)"
  mkdir -p "$d/l" "$d/u" "$d/w" "$d/m"
  if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
    umount "$d/m"; rm -rf "$d"; echo overlay2
  else
    rm -rf "$d"; echo vfs
  fi
}
STORAGE="$(pick_storage)"

if [ -n "$RUNSC" ]; then
  # A config this script wrote before it had the wrapper is brought up to date.
  if [ ! -s "$CONFIG" ] || [ "$(cat "$CONFIG")" = "$(daemon_config "$RUNSC")" ]; then
    mkdir -p "$(dirname "$CONFIG")"
    daemon_config "$RUNTIME_WRAPPER" >"$CONFIG"
    echo "start-dockerd: wrote $CONFIG (runtime runsc through $RUNTIME_WRAPPER, experimental)" >&2
  elif ! grep -q '"runsc"' "$CONFIG"; then
    echo "start-dockerd: note: $CONFIG exists without a runsc runtime; left as it is" >&2
  fi
fi

# --iptables=false / --ip-masq=false: sessions default to NetworkMode none, and nf_tables
# backed iptables is unavailable in many CI VMs; without it dockerd refuses to start.
# Bridge networking still works for containers that are granted network (no NAT to outside).
ARGS=(--storage-driver="$STORAGE" --iptables=false --ip-masq=false ${DOCKERD_EXTRA_ARGS:-})

echo "start-dockerd: starting dockerd ${ARGS[*]} (log: $LOG)" >&2
rm -f "$SOCK"
nohup dockerd "${ARGS[@]}" >"$LOG" 2>&1 </dev/null &
PID=$!

deadline=$(( $(date +%s) + WAIT ))
until engine_answers; do
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "start-dockerd: dockerd exited; last log lines:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "start-dockerd: engine did not answer within ${WAIT}s; last log lines:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
  sleep 0.5
done
echo "start-dockerd: engine up (pid $PID, storage $STORAGE)" >&2
