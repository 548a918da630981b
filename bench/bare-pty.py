"""A bare terminal's speed on this machine (docs/benchmarks.md, "The docker path"): the floor of
any PTY stream, ours, the raw exec's and the local backend's alike.

dd writes 64 KiB blocks to a new pseudo-terminal's slave; this process reads the master in reads
of up to 1 MiB and throws the bytes away: no server, no client, no container.

  python3 bench/bare-pty.py [--mb 64] [--runs 5]
"""
import argparse
import os
import pty
import subprocess
import time


def once(mb: int) -> float:
    master, slave = pty.openpty()
    dd = subprocess.Popen(['dd', 'if=/dev/zero', 'bs=65536', f'count={mb * 16}'],
                          stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    got = 0
    t = time.perf_counter()
    while True:
        try:
            chunk = os.read(master, 1 << 20)
        except OSError:  # EIO: every holder of the slave is gone
            break
        if not chunk:
            break
        got += len(chunk)
    dd.wait()
    elapsed = time.perf_counter() - t
    os.close(master)
    return got / 1e6 / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--mb', type=int, default=64)
    ap.add_argument('--runs', type=int, default=5)
    a = ap.parse_args()
    rates = sorted(once(a.mb) for _ in range(a.runs))
    print(f'load average: {" ".join(f"{x:.2f}" for x in os.getloadavg())}')
    print(f'bare terminal, {a.mb} MB: {rates[len(rates) // 2]:.0f} MB/s median '
          f'({rates[0]:.0f}-{rates[-1]:.0f}, {a.runs} runs)')


if __name__ == '__main__':
    main()
