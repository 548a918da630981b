# syntax=docker/dockerfile:1
# exec-server image. The server runs TypeScript through tsx (a runtime dependency), so there is
# no compile step: the builder installs node_modules and builds the two small native helpers of
# the local backend (build/pty-relay, build/sandbox-join).

FROM node:20-bookworm-slim AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
# The postinstall step builds build/pty-relay (PTY mode) and build/sandbox-join (warm sandboxes).
COPY scripts/build-native.sh ./scripts/
COPY native ./native
# Production dependencies only (tsx is one); make/python3/g++ also let dockerode's optional
# native extras (cpu-features, ssh2) build.
RUN npm ci --omit=dev --no-audit --no-fund \
 && npm cache clean --force

FROM node:20-bookworm-slim
# bubblewrap: the sandbox of the local backend. ca-certificates: TLS to remote engines.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 exec-server \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/exec-server --create-home --shell /usr/sbin/nologin exec-server
WORKDIR /app
ENV NODE_ENV=production
COPY --from=builder /app/node_modules ./node_modules
COPY --from=builder /app/build ./build
COPY package.json package-lock.json ./
COPY bin ./bin
COPY src ./src
USER 10001:10001
EXPOSE 8765
# Docker only (Kubernetes uses the chart's probes); assumes the default port.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8765/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "bin/exec-server.js"]
CMD ["serve", "--listen", "ws://0.0.0.0:8765"]
