/** Polling and clock hooks shared by the views. */
import { useEffect, useRef, useState } from 'preact/hooks';

export type Loaded<T> =
  | { readonly kind: 'loading' }
  | { readonly kind: 'ready'; readonly data: T; readonly error?: Error | undefined }
  | { readonly kind: 'failed'; readonly error: Error };

/**
 * Calls `load` now and every `everyMs` (never two at once). A failure after a success keeps
 * the last data and reports the error beside it, so a blip does not blank the page. A failure
 * `final` accepts (the thing is gone) stops the polling until the returned reload is called.
 */
export function usePoll<T>(
  load: () => Promise<T>,
  everyMs: number,
  deps: readonly unknown[],
  final?: (err: Error) => boolean,
): [Loaded<T>, () => void] {
  const [state, setState] = useState<Loaded<T>>({ kind: 'loading' });
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  const finalRef = useRef(final);
  finalRef.current = final;
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async (): Promise<void> => {
      try {
        const data = await loadRef.current();
        if (!stopped) setState({ kind: 'ready', data });
      } catch (err) {
        if (!stopped)
          setState((prev) =>
            prev.kind === 'ready'
              ? { kind: 'ready', data: prev.data, error: err as Error }
              : { kind: 'failed', error: err as Error },
          );
        if (finalRef.current?.(err as Error)) return;
      }
      if (!stopped) timer = setTimeout(() => void run(), everyMs);
    };
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [...deps, tick, everyMs]);
  return [state, () => setTick((t) => t + 1)];
}

/** The current time, updated every `everyMs` (ages and durations). */
export function useNow(everyMs = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(t);
  }, [everyMs]);
  return now;
}
