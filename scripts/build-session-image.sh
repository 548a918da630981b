#!/usr/bin/env bash
# Builds the default session image `exec-server-session:latest` without any container registry:
# a Debian root filesystem made by mmdebstrap from Debian's packages (docker/session-packages.txt:
# bash, coreutils, git, curl, python3, Node.js, build tools, ripgrep...), imported with
# `docker import`. docker/session.Dockerfile builds the same contents where `debian` can be pulled.
#
# The image: an unprivileged `sandbox` user (uid/gid 1000, home /home/sandbox, bash) that the
# docker backend's sandbox runs commands as, /workspace, LANG=C.UTF-8 (glibc's built-in locale),
# no apt lists, no man pages or docs.
#
# Idempotent and cache-friendly: the image carries a label with a hash of its inputs (this
# script and scripts/lib/image.sh, the package list, the suite); when an image with that hash
# exists nothing is done (FORCE=1 rebuilds). Downloaded packages are kept in $CACHE (default
# /var/cache/exec-server/session-debs), so a rebuild downloads only what changed.
#
# Needs: root (or a user who may run mmdebstrap's unshare mode), mmdebstrap, a Docker engine, and
# a Debian mirror: MIRROR (a URL or a sources file) or, by default, this machine's apt sources.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=build-session-image
# shellcheck source=lib/image.sh
. scripts/lib/image.sh

IMAGE="${IMAGE:-exec-server-session:latest}"
SUITE="${SUITE:-bookworm}"
CACHE="${CACHE:-/var/cache/exec-server/session-debs}"
PACKAGES_FILE=docker/session-packages.txt

command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap is missing (apt-get install -y mmdebstrap)"
require_docker
packages="$(grep -v '^\s*#' "$PACKAGES_FILE" | grep -v '^\s*$' | paste -sd, -)"
[ -n "$packages" ] || die "$PACKAGES_FILE lists no packages"

# The mirror: MIRROR, else every enabled apt source of this machine (deb822 and one-line form).
mirrors=()
if [ -n "${MIRROR:-}" ]; then
  mirrors=("$MIRROR")
else
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$f" ] && grep -qE '^\s*(deb |Types:)' "$f" && mirrors+=("$f")
  done
fi
[ "${#mirrors[@]}" -gt 0 ] || die "no Debian mirror: set MIRROR (e.g. http://deb.debian.org/debian) or configure apt"

HASH="$(cat "$0" scripts/lib/image.sh "$PACKAGES_FILE" <(echo "$SUITE") | sha256sum | cut -c1-16)"
image_current "$IMAGE" exec-server.session-image-hash "$HASH" && exit 0

mkdir -p "$CACHE"
started=$(date +%s)
echo "build-session-image: building $IMAGE from Debian $SUITE ($HASH)" >&2

# Hooks run on the host with the new root as $1. sync-in/sync-out carry the .deb cache across
# builds; the customize hook adds the sandbox user and the workspace, then drops what an image
# does not need.
# shellcheck disable=SC2016
mmdebstrap \
  --variant=minbase \
  --format=tar \
  --include="$packages" \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --skip=essential/unlink \
  --setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
  --setup-hook="sync-in $CACHE /var/cache/apt/archives/" \
  --customize-hook="sync-out /var/cache/apt/archives $CACHE" \
  --customize-hook='chroot "$1" groupadd --gid 1000 sandbox' \
  --customize-hook='chroot "$1" useradd --uid 1000 --gid 1000 --create-home --home-dir /home/sandbox --shell /bin/bash sandbox' \
  --customize-hook='mkdir -p "$1"/workspace && chmod 755 "$1"/workspace' \
  --customize-hook='echo exec-server-session >"$1"/etc/hostname' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/archives/*.deb "$1"/var/cache/apt/*.bin "$1"/var/log/apt "$1"/var/log/dpkg.log' \
  "$SUITE" - "${mirrors[@]}" |
  docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' \
    -c 'WORKDIR /workspace' \
    -c 'CMD ["/bin/bash"]' \
    -c "LABEL exec-server.session-image-hash=$HASH" \
    -c "LABEL org.opencontainers.image.description=\"exec-server session image: Debian $SUITE with $packages\"" \
    - "$IMAGE" >/dev/null

size="$(docker image inspect -f '{{ .Size }}' "$IMAGE")"
echo "build-session-image: built $IMAGE ($HASH) in $(($(date +%s) - started)) s, $((size / 1000000)) MB" >&2
