#!/bin/sh
# Builds the native helpers into build/. Run by `npm install`/`npm ci` (postinstall).
#  - build/pty-relay (native/pty-relay.c): runs a PTY-mode command of the local backend; without
#    it the local backend refuses PTY mode with a clear error (pipe mode and docker still work);
#  - build/sandbox-join (native/sandbox-join.c): the holder of a kept-warm sandbox and the way
#    into it; without it every sandboxed command gets its own bwrap (slower, same confinement);
#  - build/relay-spawner (native/relay-spawner.c): starts a local session's relays so the server
#    need not fork itself per command; without it the server spawns each relay (slower);
#  - build/exec-agent (native/exec-agent.c, statically linked: it runs inside session containers
#    of any image): the docker backend's agent; without it docker sessions use one engine exec
#    per command (slower, same contract).
# A failure is reported but never fails the install.
cd "$(dirname "$0")/.." || exit 0
[ "$(uname -s)" = Linux ] || exit 0
cc=$(command -v cc || command -v gcc || command -v clang) || {
  echo "build-native: no C compiler: the local backend will refuse PTY mode, and sandboxed commands will each start their own bwrap" >&2
  exit 0
}
mkdir -p build
# The local helpers are exec'd once or twice per command (pty-relay, sandbox-join): statically
# linked they skip the dynamic loader, about 0.15 ms per exec here. Dynamic where there is no libc.a.
static=
[ -f "$("$cc" -print-file-name=libc.a)" ] && static=-static
for helper in pty-relay sandbox-join relay-spawner; do
  if "$cc" -O2 -Wall $static -o "build/$helper.tmp" "native/$helper.c"; then
    mv "build/$helper.tmp" "build/$helper"
  else
    rm -f "build/$helper.tmp"
    echo "build-native: compiling native/$helper.c failed (see above)" >&2
  fi
done
# Static: needs libc.a (Debian: libc6-dev).
if "$cc" -O2 -Wall -static -o build/exec-agent.tmp native/exec-agent.c; then
  mv build/exec-agent.tmp build/exec-agent
else
  rm -f build/exec-agent.tmp
  echo "build-native: compiling native/exec-agent.c failed (see above): docker sessions will use one engine exec per command" >&2
fi
exit 0
