#!/usr/bin/env bash
# Builds the server image from the repository's Dockerfile on a machine that reaches no
# container registry, the way CI does before test/image/ runs it.
#
# 1. A local base image stands in for the Dockerfile's default `node:*-bookworm-slim`: Debian
#    (the suite of the host's apt sources, `mmdebstrap --variant=minbase`, documentation left
#    out as in Debian's slim images) plus the host's Node.js and npm under /usr/local, the
#    layout of the official Node images, imported with `docker import`. The host's Node.js
#    must satisfy package.json's engines. The base also carries the CA bundle npm's `cafile`
#    names, or else the one NODE_EXTRA_CA_CERTS names (as NODE_EXTRA_CA_CERTS), so `npm ci`
#    inside the build trusts what the host trusts. It is rebuilt only when its inputs change
#    (a hash label).
# 2. `docker build --build-arg BASE_IMAGE=<that image>` of the unchanged Dockerfile, with the
#    host network (the build downloads Debian and npm packages); the engine's layer cache makes
#    a rebuild without changes to package*.json or the native sources take seconds.
#
# Environment:
#   IMAGE        image to build (default exec-server:ci)
#   BASE_IMAGE   use this base instead of building one (e.g. node:24-bookworm-slim)
#   FORCE_BASE=1 rebuild the local base even when its hash matches
#   NO_CACHE=1   build the Dockerfile without the engine's layer cache (to measure a cold build)
#   BASE_CACHE   directory keeping the base's downloaded .deb files between runs
#                (default /var/cache/exec-server-base-debs; empty: no cache)
#   SOURCE       org.opencontainers.image.source (default: the `origin` remote when it is an
#                https URL, its user information removed; else empty)
# Prints the image's size and the time each step took.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-exec-server:ci}"
BASE_CACHE="${BASE_CACHE-/var/cache/exec-server-base-debs}"

NAME=build-server-image
# shellcheck source=lib/image.sh
. scripts/lib/image.sh
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

require_docker

# --- 1. the local base image -------------------------------------------------------------------
build_base() {
  command -v mmdebstrap >/dev/null || die "mmdebstrap missing (apt-get install -y mmdebstrap)"
  local node npm_dir sources cafile suite
  node="$(readlink -f "$(command -v node)")" || die "no node on PATH"
  npm_dir="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
  [ -f "$npm_dir/package.json" ] || die "cannot find npm's package directory (from $(command -v npm))"
  sources=/etc/apt/sources.list.d/debian.sources
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  [ -f "$sources" ] || die "no apt sources on the host"
  suite="$(. /etc/os-release && echo "$VERSION_CODENAME")"
  [ -n "$suite" ] || die "cannot tell the host's Debian suite from /etc/os-release"
  cafile="$(npm config get cafile 2>/dev/null || true)"
  case "$cafile" in null|undefined) cafile="" ;; esac
  [ -z "$cafile" ] || [ -f "$cafile" ] || die "npm's cafile $cafile does not exist"
  # Node.js (and so npm) on the host also trusts NODE_EXTRA_CA_CERTS: without it in the base,
  # `npm ci` in the build fails where the host's npm works (a TLS-intercepting proxy).
  if [ -z "$cafile" ] && [ -n "${NODE_EXTRA_CA_CERTS:-}" ]; then
    [ -f "$NODE_EXTRA_CA_CERTS" ] || die "NODE_EXTRA_CA_CERTS $NODE_EXTRA_CA_CERTS does not exist"
    cafile="$NODE_EXTRA_CA_CERTS"
  fi

  local node_version tag hash
  node_version="$("$node" --version)"
  tag="exec-server-base:node${node_version#v}-$suite"
  # The recipe below is part of the hash through this function's own text.
  hash="$( { declare -f build_base; "$node" --version; sha256sum "$node"; cat "$npm_dir/package.json" "$sources";
    [ -z "$cafile" ] || cat "$cafile"; } | sha256sum | cut -c1-16)"
  BASE_IMAGE="$tag"
  if [ "${FORCE_BASE:-0}" != 1 ]; then
    local have
    have="$(docker image inspect -f '{{ index .Config.Labels "exec-server.base-image-hash" }}' "$tag" 2>/dev/null || true)"
    if [ "$have" = "$hash" ]; then
      echo "build-server-image: base $tag is up to date ($hash)" >&2
      return
    fi
  fi

  local start; start="$(now)"
  local hooks=()
  if [ -n "$BASE_CACHE" ]; then
    mkdir -p "$BASE_CACHE"
    # Downloaded packages kept between runs; the image itself leaves them out.
    hooks+=(--skip=download/empty --skip=essential/unlink
      --setup-hook='mkdir -p "$1/var/cache/apt/archives/partial"'
      --setup-hook="sync-in '$BASE_CACHE' /var/cache/apt/archives/"
      --customize-hook="sync-out /var/cache/apt/archives '$BASE_CACHE'"
      --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb')
  fi
  local ca_hooks=() ca_env=()
  if [ -n "$cafile" ]; then
    ca_hooks=(--customize-hook='mkdir -p "$1/etc/ssl"'
      --customize-hook="upload '$cafile' /etc/ssl/exec-server-build-ca.pem")
    ca_env=(-c 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/exec-server-build-ca.pem')
  fi

  # Slim like Debian's slim images: no manuals, no docs but the copyright files, no locales;
  # and, like them, dpkg without an fsync per file (force-unsafe-io), which makes the install
  # several times faster on a busy disk.
  mmdebstrap --variant=minbase --mode=root --format=tar ${MMDEBSTRAP_ARGS:---quiet} \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='force-unsafe-io' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    "${hooks[@]}" \
    --customize-hook="upload '$node' /usr/local/bin/node" \
    --customize-hook='chmod 755 "$1/usr/local/bin/node"' \
    --customize-hook='mkdir -p "$1/usr/local/lib/node_modules/npm"' \
    --customize-hook="sync-in '$npm_dir' /usr/local/lib/node_modules/npm" \
    --customize-hook='ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"' \
    --customize-hook='ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"' \
    "${ca_hooks[@]}" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/log/apt/* "$1"/var/log/dpkg.log' \
    "$suite" - "$sources" \
  | docker import \
      -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      -c "ENV NODE_VERSION=${node_version#v}" \
      "${ca_env[@]}" \
      -c 'CMD ["node"]' \
      -c "LABEL exec-server.base-image-hash=$hash" \
      - "$tag" >/dev/null
  docker run --rm --network none "$tag" node -e 'process.exit(0)' \
    || die "the base image $tag cannot run node"
  echo "build-server-image: built base $tag ($hash) in $(since "$start") s" >&2
  # Untagged images on earlier bases this script made (the label is inherited); those on this
  # base stay: the builder stage's cache is one of them. Best effort.
  local id
  for id in $(docker images -q --filter dangling=true --filter label=exec-server.base-image-hash); do
    [ "$(docker image inspect -f '{{ index .Config.Labels "exec-server.base-image-hash" }}' "$id")" = "$hash" ] \
      || docker rmi "$id" >/dev/null 2>&1 || true
  done
}

if [ -z "${BASE_IMAGE:-}" ]; then
  # The base gets the host's Node.js: one older than package.json's engines would give an image
  # on a Node.js the project does not support (a host's system node is often older).
  node -e '
    const min = /^>=\s*(\d+)/.exec(require("./package.json").engines?.node ?? "")?.[1];
    const major = Number(process.versions.node.split(".")[0]);
    if (min !== undefined && major < Number(min)) {
      console.error(`build-server-image: node ${process.version} on PATH is older than package.json engines (>=${min}): put a newer Node.js first on PATH (.ci/run installs Node.js 24), or set BASE_IMAGE`);
      process.exit(1);
    }' || exit 1
  build_base
fi

# --- 2. the Dockerfile -------------------------------------------------------------------------
version="$(node -p 'require("./package.json").version')"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -z "${SOURCE+set}" ]; then
  SOURCE="$(git remote get-url origin 2>/dev/null || true)"
  # Only a public https address, never a token or user name (https://user:token@host/...).
  case "$SOURCE" in
    https://*)
      rest="${SOURCE#https://}"
      case "${rest%%/*}" in *@*) rest="${rest#*@}" ;; esac
      SOURCE="https://$rest"
      ;;
    *) SOURCE="" ;;
  esac
fi
start="$(now)"
# The classic builder: BuildKit needs the buildx plugin (or a frontend image from a registry)
# with newer clients; the Dockerfile uses nothing the classic builder lacks.
cache=()
[ "${NO_CACHE:-0}" != 1 ] || cache=(--no-cache)
DOCKER_BUILDKIT=0 docker build --network host --quiet "${cache[@]}" \
  --build-arg "BASE_IMAGE=$BASE_IMAGE" \
  --build-arg "VERSION=$version" \
  --build-arg "REVISION=$revision" \
  --build-arg "SOURCE=$SOURCE" \
  -t "$IMAGE" . >/dev/null \
  || die "docker build failed (run it without --quiet to see why: DOCKER_BUILDKIT=0 docker build --network host --build-arg BASE_IMAGE=$BASE_IMAGE .)"
size="$(docker image inspect -f '{{ .Size }}' "$IMAGE")"
base_size="$(docker image inspect -f '{{ .Size }}' "$BASE_IMAGE")"
echo "build-server-image: built $IMAGE from $BASE_IMAGE in $(since "$start") s;" \
  "size $((size / 1000000)) MB (base $((base_size / 1000000)) MB, added $(((size - base_size) / 1000000)) MB)" >&2
