#!/bin/sh
# Builds build/sandbox-join (native/sandbox-join.c): the holder of a kept-warm sandbox and the
# way into it. Run by `npm install`/`npm ci` (postinstall). Optional: without it every sandboxed
# command gets its own bwrap (slower, same confinement), so a failure never fails the install.
cd "$(dirname "$0")/.." || exit 0
[ "$(uname -s)" = Linux ] || exit 0
cc=$(command -v cc || command -v gcc || command -v clang) || {
  echo "build-native: no C compiler; sandboxed commands will each start their own bwrap" >&2
  exit 0
}
mkdir -p build
if "$cc" -O2 -Wall -o build/sandbox-join.tmp native/sandbox-join.c; then
  mv build/sandbox-join.tmp build/sandbox-join
else
  rm -f build/sandbox-join.tmp
  echo "build-native: compiling native/sandbox-join.c failed; sandboxed commands will each start their own bwrap" >&2
fi
exit 0
