/**
 * A PTY in xterm.js. Read-only until the user turns on interactive mode; then keystrokes go to
 * `process/write` and the terminal's size follows the panel (`process/resize`).
 */
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import { useEffect, useRef } from 'preact/hooks';

export interface TerminalHandle {
  write(data: Uint8Array | string): void;
}

export interface TerminalProps {
  readonly interactive: boolean;
  readonly onInput: (data: string) => void;
  readonly onResize: (cols: number, rows: number) => void;
  readonly handle: (h: TerminalHandle | undefined) => void;
}

export function TerminalView({ interactive, onInput, onResize, handle }: TerminalProps) {
  const host = useRef<HTMLElement>(null);
  const term = useRef<Terminal | undefined>(undefined);
  const fit = useRef<FitAddon | undefined>(undefined);
  const props = useRef({ interactive, onInput, onResize });
  props.current = { interactive, onInput, onResize };

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    const t = new Terminal({
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace',
      fontSize: 13,
      scrollback: 5000,
      cursorBlink: false,
      disableStdin: true,
      theme: { background: '#0f1419', foreground: '#e6e1cf' },
    });
    const f = new FitAddon();
    t.loadAddon(f);
    t.open(el);
    f.fit();
    term.current = t;
    fit.current = f;
    const onData = t.onData((d) => {
      if (props.current.interactive) props.current.onInput(d);
    });
    const observer = new ResizeObserver(() => {
      f.fit();
      if (props.current.interactive) props.current.onResize(t.cols, t.rows);
    });
    observer.observe(el);
    handle({ write: (d) => t.write(d) });
    return () => {
      handle(undefined);
      observer.disconnect();
      onData.dispose();
      t.dispose();
    };
  }, []);

  useEffect(() => {
    const t = term.current;
    if (!t) return;
    t.options.disableStdin = !interactive;
    t.options.cursorBlink = interactive;
    if (interactive) {
      fit.current?.fit();
      onResize(t.cols, t.rows);
      t.focus();
    }
  }, [interactive]);

  return (
    <section
      class={`terminal ${interactive ? 'terminal-live' : ''}`}
      ref={host}
      data-testid="terminal"
      aria-label={interactive ? 'Terminal (interactive)' : 'Terminal (read-only)'}
    />
  );
}
