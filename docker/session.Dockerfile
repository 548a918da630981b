# The default session image (exec-server-session:latest) for places that can pull `debian`:
#   docker build -f docker/session.Dockerfile -t exec-server-session:latest docker/
# Same contents as scripts/build-session-image.sh, which builds it without any registry: the
# Debian packages of docker/session-packages.txt, an unprivileged `sandbox` user (uid/gid 1000,
# home /home/sandbox) that the docker backend's sandbox runs commands as, /workspace, C.UTF-8.
FROM debian:bookworm-slim

COPY session-packages.txt /tmp/session-packages.txt
RUN set -eux; \
    printf 'path-exclude=/usr/share/man/*\npath-exclude=/usr/share/doc/*\npath-include=/usr/share/doc/*/copyright\npath-exclude=/usr/share/info/*\npath-exclude=/usr/share/locale/*\n' >/etc/dpkg/dpkg.cfg.d/exec-server-slim; \
    apt-get update; \
    grep -v '^\s*#' /tmp/session-packages.txt | grep -v '^\s*$' | xargs apt-get install -y --no-install-recommends; \
    rm -rf /var/lib/apt/lists/* /tmp/session-packages.txt; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --create-home --home-dir /home/sandbox --shell /bin/bash sandbox; \
    mkdir -p /workspace; chmod 755 /workspace; \
    echo exec-server-session >/etc/hostname

ENV LANG=C.UTF-8
WORKDIR /workspace
CMD ["/bin/bash"]
