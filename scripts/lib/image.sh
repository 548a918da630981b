# Sourced by scripts/build-*-image.sh (bash): what they share. The caller sets NAME (its
# messages' prefix) first.

die() {
  echo "$NAME: $*" >&2
  exit 1
}

require_docker() {
  timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers (run scripts/start-dockerd.sh)"
}

# image_current IMAGE LABEL HASH: true (and says so) when IMAGE exists with label LABEL = HASH,
# the hash of the inputs it was built from; FORCE=1 makes it false.
image_current() {
  [ "${FORCE:-0}" != 1 ] || return 1
  local have
  have="$(docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true)"
  [ "$have" = "$3" ] || return 1
  echo "$NAME: $1 is up to date ($3)" >&2
}
