#!/bin/sh
# Builds build/sandbox-join (native/sandbox-join.c), the one-exec way into a kept-warm sandbox.
# Run by `npm install`/`npm ci` (postinstall). Optional: without a C compiler the server joins
# warm sandboxes with nsenter and setpriv instead, so a failure here never fails the install.
cd "$(dirname "$0")/.." || exit 0
[ "$(uname -s)" = Linux ] || exit 0
cc=$(command -v cc || command -v gcc || command -v clang) || {
  echo "build-native: no C compiler; warm sandboxes will use nsenter and setpriv" >&2
  exit 0
}
mkdir -p build
if "$cc" -O2 -Wall -o build/sandbox-join.tmp native/sandbox-join.c; then
  mv build/sandbox-join.tmp build/sandbox-join
else
  rm -f build/sandbox-join.tmp
  echo "build-native: compiling native/sandbox-join.c failed; warm sandboxes will use nsenter and setpriv" >&2
fi
exit 0
