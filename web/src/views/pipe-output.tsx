/** Pipe output: stdout and stderr told apart, appended as it arrives (bounded in the page). */
import { useEffect, useRef } from 'preact/hooks';

export type PipeKind = 'stdout' | 'stderr' | 'note';

export interface PipeHandle {
  append(kind: PipeKind, text: string): void;
}

/** Characters kept in the page (about: whole blocks are removed); older output leaves the view (the server keeps its own retention). */
export const MAX_CHARS = 2_000_000;

/** A block holds whole lines up to about this many characters or lines, so the browser lays out only the last block as output grows. */
const BLOCK_CHARS = 16 * 1024;
const BLOCK_LINES = 400;
/** A line longer than this is split across blocks (shown as a line break) to keep every block small. */
const MAX_BLOCK_CHARS = 64 * 1024;

interface Block {
  readonly el: HTMLDivElement;
  chars: number;
  lines: number;
  last: { readonly kind: PipeKind; readonly text: Text } | undefined;
}

/**
 * The output element's content, written at most once per frame. Catching up on a long history
 * delivers thousands of chunks in a burst; touching the DOM and measuring the scroll position
 * for each one made the layout quadratic (a 1 MiB history froze the tab for over a minute), so
 * chunks are queued and one frame appends them all. The text is cut into
 * blocks of whole lines that the browser skips while they are out of view (content-visibility
 * in styles.css): one growing text node was laid out again in full on every frame, and a tab
 * following a long log froze for seconds at a time.
 */
class PipeView {
  readonly #el: HTMLElement;
  readonly #blocks: Block[] = [];
  #chars = 0;
  #atLineStart = true;
  #queue: Array<{ kind: PipeKind; text: string }> = [];
  #queued = 0;
  #frame: number | undefined;
  #settle: number | undefined;

  /** Whether the view keeps to the newest output: until the person scrolls up, and again once they scroll to the end. */
  #follow = true;
  #userAt = -Infinity;
  #pointerDown = false;
  readonly #listening = new AbortController();

  constructor(el: HTMLElement) {
    this.#el = el;
    // Only a person's scrolling changes #follow: blocks settling to their real height move
    // the scroll position too, and must not stop the view from following.
    const signal = this.#listening.signal;
    const touched = (): void => {
      this.#userAt = performance.now();
    };
    for (const type of ['wheel', 'keydown', 'touchmove'] as const)
      el.addEventListener(type, touched, { signal, passive: true });
    el.addEventListener(
      'pointerdown',
      () => {
        this.#pointerDown = true;
      },
      { signal },
    );
    addEventListener(
      'pointerup',
      () => {
        this.#pointerDown = false;
        touched();
      },
      { signal },
    );
    el.addEventListener(
      'scroll',
      () => {
        if (this.#pointerDown || performance.now() - this.#userAt < 1000)
          this.#follow = el.scrollTop + el.clientHeight >= el.scrollHeight - 8;
      },
      { signal, passive: true },
    );
  }

  append(kind: PipeKind, text: string): void {
    if (text === '') return;
    const last = this.#queue[this.#queue.length - 1];
    if (last && last.kind === kind && kind !== 'note') last.text += text;
    else this.#queue.push({ kind, text });
    this.#queued += text.length;
    // A hidden tab runs no frames: the queue is bounded like the view, oldest first.
    while (this.#queued > MAX_CHARS && this.#queue.length > 1) this.#queued -= this.#queue.shift()?.text.length ?? 0;
    this.#frame ??= requestAnimationFrame(() => this.#flush());
  }

  #flush(): void {
    this.#frame = undefined;
    const el = this.#el;
    for (const { kind, text } of this.#queue.splice(0)) this.#write(kind, text);
    this.#queued = 0;
    // Past the bound, down to a tenth below it: the oldest blocks go a few at a time, not one every frame.
    if (this.#chars > MAX_CHARS)
      while (this.#chars > MAX_CHARS * 0.9 && this.#blocks.length > 1) {
        const first = this.#blocks.shift();
        first?.el.remove();
        this.#chars -= first?.chars ?? 0;
      }
    if (this.#follow) {
      el.scrollTop = el.scrollHeight;
      // Once more after the next layout: blocks that came into view may have settled to another height.
      this.#settle ??= requestAnimationFrame(() => {
        this.#settle = undefined;
        if (this.#follow) el.scrollTop = el.scrollHeight;
      });
    }
  }

  #write(kind: PipeKind, text: string): void {
    let rest = text;
    while (rest !== '') {
      let block = this.#blocks[this.#blocks.length - 1];
      const full = block !== undefined && (block.chars >= BLOCK_CHARS || block.lines >= BLOCK_LINES);
      if (!block || (this.#atLineStart && full) || block.chars >= MAX_BLOCK_CHARS) {
        block = { el: document.createElement('div'), chars: 0, lines: 0, last: undefined };
        this.#el.append(block.el);
        this.#blocks.push(block);
      }
      // Whole lines until the block is full (a full block still takes the end of its last line), within its bound.
      let take = 0;
      for (let lines = block.lines; ; ) {
        const nl = rest.indexOf('\n', take);
        if (nl < 0) {
          take = rest.length;
          break;
        }
        take = nl + 1;
        if (++lines >= BLOCK_LINES || block.chars + take >= BLOCK_CHARS) break;
      }
      take = Math.min(take, MAX_BLOCK_CHARS - block.chars);
      const piece = rest.slice(0, take);
      rest = rest.slice(take);
      if (block.last && block.last.kind === kind && kind !== 'note') block.last.text.appendData(piece);
      else {
        const span = document.createElement('span');
        span.className = `out-${kind}`;
        const node = document.createTextNode(piece);
        span.append(node);
        block.el.append(span);
        block.last = { kind, text: node };
      }
      block.chars += piece.length;
      for (let at = piece.indexOf('\n'); at >= 0; at = piece.indexOf('\n', at + 1)) block.lines++;
      // The height it takes while out of view and not yet laid out (wrapped lines make it more).
      block.el.style.containIntrinsicSize = `auto ${Math.max(1, block.lines)}lh`;
      this.#chars += piece.length;
      this.#atLineStart = piece.endsWith('\n');
    }
  }

  dispose(): void {
    if (this.#frame !== undefined) cancelAnimationFrame(this.#frame);
    if (this.#settle !== undefined) cancelAnimationFrame(this.#settle);
    this.#listening.abort();
    this.#queue = [];
  }
}

export function PipeOutput({ handle }: { handle: (h: PipeHandle | undefined) => void }) {
  const pre = useRef<HTMLPreElement>(null);
  useEffect(() => {
    const el = pre.current;
    if (!el) return;
    const view = new PipeView(el);
    handle({ append: (kind, text) => view.append(kind, text) });
    return () => {
      handle(undefined);
      view.dispose();
    };
  }, []);
  // A log (output appended in order, the oldest dropped past MAX_CHARS); browsers let the
  // keyboard scroll a scrollable element without a tabIndex.
  return <pre class="pipe-output" ref={pre} data-testid="pipe-output" role="log" aria-label="Process output" />;
}
