"""The second hop on its own (docs/benchmarks.md, "Egress"): a minimal splice relay on the host.

busybox httpd serves a file on 127.0.0.2; wget fetches it directly and through this relay on
127.0.0.3 (the same two loopback TCP connections as a session's egress path, one process, a
loop of splice(2) through a 1 MiB pipe, no session, agent or container), alternating:

  python3 bench/bare-relay.py [--mb 256] [--pairs 5]
"""
import argparse
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from typing import Callable, cast

F_SETPIPE_SZ = 1031
# os.splice (Python 3.10+, Linux); this mypy's stubs predate it.
splice = cast(Callable[[int, int, int], int], getattr(os, 'splice'))


def relay(listener: socket.socket, upstream: tuple[str, int]) -> None:
    while True:
        client, _ = listener.accept()
        up = socket.create_connection(upstream)
        r, w = os.pipe()
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        up.sendall(client.recv(65536))  # the request: one small read
        while (n := splice(up.fileno(), w, 1 << 20)) > 0:
            while n:
                n -= splice(r, client.fileno(), n)
        for s in (client, up):
            s.close()
        os.close(r)
        os.close(w)


def fetch(url: str) -> float:
    t = time.perf_counter()
    subprocess.run(['busybox', 'wget', '-q', '-O', '/dev/null', url], check=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--mb', type=int, default=256)
    ap.add_argument('--pairs', type=int, default=5)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix='bare-relay-')
    with open(os.path.join(root, 'blob'), 'wb') as f:
        f.write(b'a' * (a.mb << 20))
    probe = socket.socket()
    probe.bind(('127.0.0.2', 0))
    port = probe.getsockname()[1]
    probe.close()
    httpd = subprocess.Popen(['busybox', 'httpd', '-f', '-p', f'127.0.0.2:{port}', '-h', root])
    listener = socket.socket()
    listener.bind(('127.0.0.3', 0))
    listener.listen(8)
    threading.Thread(target=relay, args=(listener, ('127.0.0.2', port)), daemon=True).start()
    time.sleep(0.3)
    direct, relayed = [], []
    try:
        for _ in range(a.pairs):
            direct.append(fetch(f'http://127.0.0.2:{port}/blob'))
            relayed.append(fetch(f'http://127.0.0.3:{listener.getsockname()[1]}/blob'))
    finally:
        httpd.kill()
        shutil.rmtree(root)
    d, r = sorted(direct)[len(direct) // 2], sorted(relayed)[len(relayed) // 2]
    print(f'load average: {" ".join(f"{x:.2f}" for x in os.getloadavg())}')
    print(f'direct  {a.mb / d:.0f} MB/s (median of {a.pairs})')
    print(f'relayed {a.mb / r:.0f} MB/s: {d / r:.2f}x')


if __name__ == '__main__':
    main()
