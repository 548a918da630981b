/** Pending approvals of a session (HTTP tool calls waiting for a person), with their answers. */
import { useState } from 'preact/hooks';
import type { Api, ApiError, Approval } from '../api.ts';
import { since } from '../format.ts';
import { useNow, usePoll } from '../hooks.ts';
import { Notice } from './states.tsx';

/** The answers a person can give, as buttons: the decision, its label, its style. */
const DECISIONS = [
  ['approved', 'Approve', 'btn-primary'],
  ['denied', 'Deny', 'btn-danger'],
] as const;

export function Approvals({ api, sessionId, onDecided }: { api: Api; sessionId: string; onDecided: () => void }) {
  const [state, reload] = usePoll(() => api.approvals(sessionId), 1500, [api, sessionId]);
  const [busy, setBusy] = useState<string | undefined>();
  const [outcome, setOutcome] = useState<{ tone: 'info' | 'error'; text: string } | undefined>();
  const now = useNow();

  const decide = async (a: Approval, decision: 'approved' | 'denied'): Promise<void> => {
    setBusy(a.id);
    setOutcome(undefined);
    const argv = a.argv.join(' ');
    try {
      const answer = await api.decide(sessionId, a.id, decision);
      setOutcome({
        tone: 'info',
        text: `${decision === 'approved' ? 'Approved' : 'Denied'}: ${argv}${answerText(answer)}`,
      });
    } catch (err) {
      // The answer is the original call's result: a call denied before it started answers
      // 403 EXEC_ERR_REJECTED, which is the decision taken, not a failure to take it.
      const e = err as ApiError;
      if (decision === 'denied' && e.code === 'EXEC_ERR_REJECTED')
        setOutcome({ tone: 'info', text: `Denied: ${argv} — the call was rejected` });
      else setOutcome({ tone: 'error', text: `The decision was not taken: ${e.message}` });
    } finally {
      setBusy(undefined);
      reload();
      onDecided();
    }
  };

  const approvals = state.kind === 'ready' ? state.data.approvals : [];
  return (
    <section class="card" aria-labelledby="approvals-title">
      <h2 id="approvals-title">
        Pending approvals {approvals.length > 0 ? <span class="count count-warn">{approvals.length}</span> : null}
      </h2>
      {outcome ? <Notice tone={outcome.tone}>{outcome.text}</Notice> : null}
      {state.kind === 'loading' ? <p class="muted">Loading approvals…</p> : null}
      {state.kind === 'failed' ? (
        <Notice tone="error">Approvals could not be loaded: {state.error.message}</Notice>
      ) : null}
      {state.kind === 'ready' && approvals.length === 0 ? (
        <p class="muted">Nothing waits for a decision. Tool calls that need a person appear here.</p>
      ) : null}
      <ul class="approvals">
        {approvals.map((a) => (
          <li key={a.id} class="approval" data-approval={a.id}>
            <div>
              <span class={`badge ${a.purpose === 'sandbox-retry' ? 'badge-warn' : 'badge-idle'}`}>
                {a.purpose === 'sandbox-retry' ? 'sandbox retry' : 'before start'}
              </span>{' '}
              <code class="argv-full">{a.argv.join(' ')}</code>
            </div>
            <div class="muted small">
              {a.reason} · in {a.cwd} · asked {since(a.createdAt, now)} ago
            </div>
            <div class="actions">
              {DECISIONS.map(([decision, label, style]) => (
                <button
                  key={decision}
                  type="button"
                  class={`btn ${style}`}
                  disabled={busy !== undefined}
                  onClick={() => void decide(a, decision)}
                >
                  {label}
                </button>
              ))}
            </div>
          </li>
        ))}
      </ul>
    </section>
  );
}

/** What the original call answered once decided: its exit code, or that it waits for another approval. */
function answerText(answer: Record<string, unknown> | undefined): string {
  const exit = answer?.['exit_code'];
  if (typeof exit === 'number') return ` — exited with ${exit}`;
  if (answer?.['status'] === 'approval_required') return ' — it now waits for another approval';
  return '';
}
