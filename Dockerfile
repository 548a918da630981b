# exec-server image. The server runs its TypeScript as it is (Node.js 24 strips the types
# itself; bin/exec-server.js falls back to tsx, a runtime dependency, on older Node), so there is
# no compile step: the builder installs the production node_modules, builds the native helpers
# (scripts/build-native.sh) and bundles the web console (web/build.mjs); the runtime stage gets
# those, bin/ and src/.
#
# BASE_IMAGE: any Debian bookworm image with Node.js and npm under /usr/local (the official
# node:*-bookworm-slim images). scripts/build-server-image.sh builds an equivalent one locally
# where no registry is reachable.
#   docker build -t exec-server .
#   docker build --build-arg BASE_IMAGE=exec-server-base:... --build-arg REVISION=$(git rev-parse HEAD) .
ARG BASE_IMAGE=node:24-bookworm-slim

FROM ${BASE_IMAGE} AS builder
# A C compiler for the native helpers only: npm runs no install scripts below, so dockerode's
# optional native extras (ssh2's crypto binding, cpu-features) are not built and their
# JavaScript fallbacks are used; python3/make/g++ are not needed.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: the only install scripts that matter here are the project's own postinstall
# (run explicitly below) and esbuild's, whose platform binary comes as an optional dependency.
# Type declarations, source maps and documentation are never loaded: a quarter of the size.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund \
 && npm cache clean --force \
 && rm -rf /root/.npm \
 && find node_modules -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \
      -o \( -iname '*.md' ! -iname 'license*' \) \) -delete
COPY scripts/build-native.sh ./scripts/
COPY native ./native
# build-native.sh reports a failed helper without failing (for `npm install`); an image without
# one would be broken, so every native/*.c with a main() must have produced its build/ binary
# (the others, such as exec-agent-egress.c, are included by one that has).
RUN sh scripts/build-native.sh \
 && for src in native/*.c; do \
      grep -q '^int main(' "$src" || continue; \
      helper="build/$(basename "$src" .c)"; \
      [ -x "$helper" ] || { echo "missing $helper" >&2; exit 1; }; \
    done
# The server's sources: the console bundles the wire types and the SDK's error classes from them.
COPY src ./src
# The web console's bundle (build/console/, served at /console/); its sources stay here.
COPY web ./web
RUN node web/build.mjs && test -f build/console/index.html
# The server's JavaScript (dist/): the sources with their types stripped, so production starts
# without a TypeScript loader (bin/exec-server.js runs dist/ under NODE_ENV=production).
COPY scripts/build-dist-strip.mjs ./scripts/
RUN node scripts/build-dist-strip.mjs && test -f dist/main.js

FROM ${BASE_IMAGE}
# bubblewrap: the sandbox of the local backend. ca-certificates: TLS to remote engines.
# tini: PID 1 that forwards signals and reaps orphaned processes (the local backend's commands
# can leave some), as Kubernetes has no `docker run --init`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 exec-server \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/exec-server --create-home --shell /usr/sbin/nologin exec-server
WORKDIR /app
ENV NODE_ENV=production
# Root-owned and not writable by the server user; the root filesystem can be read-only as long
# as /tmp is writable (tsx's compile cache).
COPY --from=builder /app/node_modules ./node_modules
COPY --from=builder /app/build ./build
COPY package.json package-lock.json ./
COPY bin ./bin
COPY src ./src
COPY --from=builder /app/dist ./dist
# Last, so a new revision reuses every layer above.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=""
LABEL org.opencontainers.image.title="exec-server" \
      org.opencontainers.image.description="Runs commands for AI coding agents remotely: per-session containers, PTY and pipe processes, Codex-compatible WebSocket JSON-RPC and HTTP." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
EXPOSE 8765
# Docker only (Kubernetes uses the chart's probes); assumes the default port.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8765/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# A young generation of 2 MiB semi-spaces instead of V8's 16: an idle server holds ~40 MB less
# (docs/benchmarks.md, "Server memory").
ENTRYPOINT ["/usr/bin/tini", "--", "node", "--max-semi-space-size=2", "bin/exec-server.js"]
CMD ["serve", "--listen", "ws://0.0.0.0:8765"]
