/** Drives programs in a real terminal: a private tmux server per test. */
import { execFileSync, spawnSync } from 'node:child_process';
import type { TestContext } from 'node:test';

export function tmuxAvailable(): boolean {
  return spawnSync('tmux', ['-V'], { stdio: 'ignore' }).status === 0;
}

/** Skips without tmux, except under CI=true, where a missing tmux is a failure. */
export function requireTmux(t: TestContext): boolean {
  if (tmuxAvailable()) return true;
  if (process.env['CI'] === 'true')
    throw new Error('tmux is required for the CLI terminal tests under CI (apt-get install tmux)');
  t.skip('tmux is not installed');
  return false;
}

let counter = 0;

export class Tmux {
  readonly socket = `exec-server-test-${process.pid}-${++counter}`;
  readonly target = 'main';

  constructor(env: Record<string, string>, cols = 100, rows = 30) {
    const envArgs = Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
    this.#tmux([
      '-f',
      '/dev/null',
      'new-session',
      '-d',
      '-s',
      this.target,
      '-x',
      String(cols),
      '-y',
      String(rows),
      ...envArgs,
      'bash --norc --noprofile',
    ]);
    this.#tmux(['set-option', '-g', 'status', 'off']);
    this.#tmux(['set-option', '-g', 'history-limit', '10000']);
  }

  #tmux(args: string[]): string {
    return execFileSync('tmux', ['-L', this.socket, ...args], { encoding: 'utf8' });
  }

  /** Types `text` and presses Enter. */
  line(text: string): void {
    this.#tmux(['send-keys', '-t', this.target, '-l', text]);
    this.#tmux(['send-keys', '-t', this.target, 'Enter']);
  }

  keys(...keys: string[]): void {
    this.#tmux(['send-keys', '-t', this.target, ...keys]);
  }

  resize(cols: number, rows: number): void {
    this.#tmux(['resize-window', '-t', this.target, '-x', String(cols), '-y', String(rows)]);
  }

  screen(): string {
    return this.#tmux(['capture-pane', '-p', '-J', '-t', this.target, '-S', '-10000']);
  }

  async waitFor(re: RegExp, timeoutMs = 30_000): Promise<RegExpExecArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = re.exec(this.screen());
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${re} on the terminal:\n${this.screen()}`);
      await new Promise((r) => setTimeout(r, 150));
    }
  }

  kill(): void {
    try {
      this.#tmux(['kill-server']);
    } catch {
      // already gone
    }
  }
}
