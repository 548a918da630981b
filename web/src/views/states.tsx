/** The designed empty, loading and error states every view uses. */
import type { ComponentChildren } from 'preact';

export function Loading({ what }: { what: string }) {
  return (
    <div class="state state-loading" role="status" aria-live="polite">
      <span class="spinner" aria-hidden="true" />
      <span>Loading {what}…</span>
    </div>
  );
}

export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="state state-empty">
      <p class="state-title">{title}</p>
      {children ? <div class="state-hint">{children}</div> : null}
    </div>
  );
}

export function ErrorState({ title, error, onRetry }: { title: string; error: Error; onRetry?: () => void }) {
  return (
    <div class="state state-error" role="alert">
      <p class="state-title">{title}</p>
      <p class="state-hint">{error.message}</p>
      {onRetry ? (
        <button type="button" class="btn" onClick={onRetry}>
          Try again
        </button>
      ) : null}
    </div>
  );
}

/** A slim notice above data that is still shown (a refresh failed, the socket reconnects). */
export function Notice({ tone, children }: { tone: 'warn' | 'error' | 'info'; children: ComponentChildren }) {
  return (
    <div class={`notice notice-${tone}`} role={tone === 'info' ? 'status' : 'alert'}>
      {children}
    </div>
  );
}
