import { readdirSync, readFileSync } from 'node:fs';

/** The `exec-agent relayd` processes this process started and that still run (read from /proc). */
export function relaydPids(): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      // (a process that ended and is not reaped yet has no command line)
      const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (ppid === process.pid && argv[0]?.endsWith('/exec-agent') && argv[1] === 'relayd') found.push(Number(name));
    } catch {
      // (gone meanwhile)
    }
  }
  return found;
}
