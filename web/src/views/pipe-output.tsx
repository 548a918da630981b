/** Pipe output: stdout and stderr told apart, appended as it arrives (bounded in the page). */
import { useEffect, useRef } from 'preact/hooks';

export interface PipeHandle {
  append(kind: 'stdout' | 'stderr' | 'note', text: string): void;
}

/** Characters kept in the page; older output is removed from the view (the server keeps its own retention). */
const MAX_CHARS = 2_000_000;

export function PipeOutput({ handle }: { handle: (h: PipeHandle | undefined) => void }) {
  const pre = useRef<HTMLPreElement>(null);
  useEffect(() => {
    const el = pre.current;
    if (!el) return;
    let chars = 0;
    let last: { kind: string; span: HTMLSpanElement } | undefined;
    handle({
      append(kind, text) {
        if (text === '') return;
        const stick = el.scrollTop + el.clientHeight >= el.scrollHeight - 8;
        if (last && last.kind === kind && kind !== 'note') last.span.append(text);
        else {
          const span = document.createElement('span');
          span.className = `out-${kind}`;
          span.textContent = text;
          el.append(span);
          last = { kind, span };
        }
        chars += text.length;
        while (chars > MAX_CHARS && el.firstChild && el.firstChild !== last.span) {
          chars -= el.firstChild.textContent?.length ?? 0;
          el.firstChild.remove();
        }
        if (stick) el.scrollTop = el.scrollHeight;
      },
    });
    return () => handle(undefined);
  }, []);
  // A log (output appended in order, the oldest dropped past MAX_CHARS); browsers let the
  // keyboard scroll a scrollable element without a tabIndex.
  return <pre class="pipe-output" ref={pre} data-testid="pipe-output" role="log" aria-label="Process output" />;
}
