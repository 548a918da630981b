#!/bin/sh
# The engine's `runsc` runtime: registered in the daemon config in place of runsc itself
# (scripts/start-dockerd.sh installs it), it passes every call to runsc unchanged but one.
#
# Why: runsc 0.0~20221219 (Debian 12) checkpoints a container that was itself restored from a
# checkpoint into the state "paused" and then cannot delete it ("invalid state transition:
# paused => stopped"): the shim's `delete` fails, containerd keeps the task, and the next
# restore of that container fails with "id already in use", so a session could hibernate once
# and not twice. For an entry that is paused with its sandbox gone, `delete` is finished with
# `delete --force` (which still panics on that transition, after it has removed the entry) and
# succeeds once the entry is gone; a `restore` or `create` finds such a leftover removed first.
#
# And: at each restore the engine uploads the checkpoint to containerd's content store (and
# deletes it once the start returns), where two uploads of the same bytes at once collide
# ("failed to upload checkpoint to containerd: commit failed: content sha256:...: already
# exists"); idle containers of one image checkpoint to the same bytes every time, so sessions
# woken together would fail. After a `checkpoint`, a file naming it (time, pid, container) is
# added to the image directory, which runsc's restore ignores: no two checkpoints are alike.
set -u
RUNSC="${EXEC_SERVER_RUNSC:-/usr/bin/runsc}"

root=''
sub=''
prev=''
id=''
image=''
for arg in "$@"; do
  case "$prev" in --root) root=$arg ;; esac
  case "$arg" in --root=*) root=${arg#--root=} ;; esac
  case "$prev" in --image-path) image=$arg ;; esac
  case "$arg" in --image-path=*) image=${arg#--image-path=} ;; esac
  if [ -z "$sub" ]; then
    case "$arg" in restore | create | delete | checkpoint) sub=$arg ;; esac
  fi
  prev=$arg
  id=$arg
done

# True when the entry of $id is paused and its sandbox process is gone.
stale() {
  state=$("$RUNSC" --root "$root" state "$id" 2>/dev/null) || return 1
  case "$state" in *'"status": "paused"'*) ;; *) return 1 ;; esac
  pid=$(printf '%s\n' "$state" | sed -n 's/^ *"pid": \(-\{0,1\}[0-9]*\),*$/\1/p' | head -n 1)
  [ -z "$pid" ] || [ "$pid" -le 0 ] || ! kill -0 "$pid" 2>/dev/null
}

remove_stale() {
  if stale; then "$RUNSC" --root "$root" delete --force "$id" >/dev/null 2>&1 || :; fi
}

if [ -z "$sub" ] || [ -z "$root" ] || [ -z "$id" ]; then exec "$RUNSC" "$@"; fi
case "$sub" in
  restore | create) remove_stale ;;
  checkpoint)
    "$RUNSC" "$@" || exit $?
    # The engine's own checkpoint directory, never a link (nothing here follows one).
    if [ -n "$image" ] && [ -d "$image" ] && [ ! -L "$image" ] && [ ! -L "$image/exec-server-checkpoint" ]; then
      echo "$(date +%s%N) $$ $id" >"$image/exec-server-checkpoint" 2>/dev/null || :
    fi
    exit 0
    ;;
  delete)
    "$RUNSC" "$@" && exit 0
    rc=$?
    remove_stale
    "$RUNSC" --root "$root" state "$id" >/dev/null 2>&1 || exit 0
    exit "$rc"
    ;;
esac
exec "$RUNSC" "$@"
