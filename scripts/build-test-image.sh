#!/usr/bin/env bash
# Builds the local test image `exec-server-test:latest` without any registry:
# a rootfs assembled from Debian's busybox-static (plus Debian's bash and its libraries, so
# Codex-style `bash -lc` commands work), imported with `docker import`.
#
# Contents: busybox applets as symlinks (/bin/sh included), /bin/bash, /etc/passwd with `root`
# and an unprivileged `sandbox` (uid/gid 1000, used by the container-user sandbox), /tmp 1777,
# /workspace, /root, /home/sandbox.
#
# Idempotent and fast: the image carries a label with a hash of its inputs; when an image with
# the same hash exists nothing is rebuilt. FORCE=1 rebuilds anyway.
set -euo pipefail
NAME=build-test-image
LIB="$(dirname "$0")/lib/image.sh"
# shellcheck source=lib/image.sh
. "$LIB"

IMAGE="${IMAGE:-exec-server-test:latest}"
BUSYBOX="${BUSYBOX:-/bin/busybox}"
BASH_BIN="${BASH_BIN:-/bin/bash}"

if [ ! -x "$BUSYBOX" ] || ! "$BUSYBOX" --list >/dev/null 2>&1; then
  die "$BUSYBOX missing (apt-get install -y busybox-static)"
fi
require_docker

# The inputs hash: this script, its library, busybox and bash binaries.
HASH="$(cat "$0" "$LIB" "$BUSYBOX" "$BASH_BIN" | sha256sum | cut -c1-16)"
image_current "$IMAGE" exec-server.test-image-hash "$HASH" && exit 0

ROOT="$(mktemp -d /tmp/exec-server-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT

mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,root,home/sandbox,workspace,run,var/tmp,proc,sys,dev}
cp "$BUSYBOX" "$ROOT/bin/busybox"
# `--list-full` gives each applet's canonical location (bin/ls, usr/bin/env...), so no chroot is needed.
"$BUSYBOX" --list-full | while read -r applet; do
  [ "$applet" = bin/busybox ] && continue
  ln -sf /bin/busybox "$ROOT/$applet"
done

# bash with exactly the shared libraries ldd reports (paths kept, so the loader finds them).
cp "$BASH_BIN" "$ROOT/bin/bash"
ldd "$BASH_BIN" | grep -oE '/[^ ]+' | while read -r lib; do
  mkdir -p "$ROOT$(dirname "$lib")"
  cp -L "$lib" "$ROOT$lib"
done

cat >"$ROOT/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
P
cat >"$ROOT/etc/group" <<'G'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
G
echo 'exec-server-test' >"$ROOT/etc/hostname"
chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp"
chmod 700 "$ROOT/root"
chown 1000:1000 "$ROOT/home/sandbox"
chmod 755 "$ROOT/workspace"

tar --numeric-owner -C "$ROOT" -c . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'WORKDIR /workspace' \
  -c 'CMD ["/bin/sh"]' \
  -c "LABEL exec-server.test-image-hash=$HASH" \
  - "$IMAGE" >/dev/null
echo "build-test-image: built $IMAGE ($HASH)" >&2
