/**
 * The session's Share button: mints a token scoped to this session (`POST
 * /v1/sessions/{id}/tokens`, read or full access, a validity) and shows a console link that
 * carries it in the URL fragment (`#/share/ID/TOKEN`): a fragment never reaches a server, a
 * log or a Referer, and the console moves it to this tab's storage and out of the address bar
 * on load (main.tsx). Revoke ends it at once, here and for whoever holds the link.
 */
import { useRef, useState } from 'preact/hooks';
import type { Api, SessionToken } from '../api.ts';
import { Notice } from './states.tsx';

/** `#/share/ID/TOKEN`: the console link of a session token. */
export function shareLink(sessionId: string, token: string): string {
  return `${location.origin}${location.pathname}#/share/${encodeURIComponent(sessionId)}/${encodeURIComponent(token)}`;
}

export function ShareButton({ api, sessionId, disabled }: { api: Api; sessionId: string; disabled: boolean }) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [access, setAccess] = useState<'read' | 'full'>('read');
  const [hours, setHours] = useState(1);
  const [made, setMade] = useState<SessionToken | undefined>();
  const [error, setError] = useState<string | undefined>();

  const create = async (): Promise<void> => {
    setError(undefined);
    try {
      setMade(await api.createSessionToken(sessionId, { access, ttlSeconds: Math.round(hours * 3600) }));
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const revoke = async (): Promise<void> => {
    if (!made) return;
    try {
      await api.revokeSessionToken(sessionId, made.tokenId);
      setMade(undefined);
    } catch (err) {
      setError((err as Error).message);
    }
  };

  return (
    <>
      <button type="button" class="btn" onClick={() => dialog.current?.showModal()} disabled={disabled}>
        Share
      </button>
      <dialog ref={dialog} class="dialog" aria-labelledby="share-title">
        <h2 id="share-title">Share this session</h2>
        <p>A link that opens this session only, until it expires or is revoked.</p>
        <label for="share-access">Access</label>
        <select
          id="share-access"
          value={access}
          onChange={(e) => setAccess((e.target as HTMLSelectElement).value === 'full' ? 'full' : 'read')}
        >
          <option value="read">Read: watch output, read files</option>
          <option value="full">Full: run commands, write files, delete</option>
        </select>
        <label for="share-hours">Valid for (hours)</label>
        <input
          id="share-hours"
          type="number"
          min={0.1}
          step={0.5}
          value={hours}
          onInput={(e) => setHours(Number((e.target as HTMLInputElement).value) || 1)}
        />
        {error ? <Notice tone="error">{error}</Notice> : null}
        {made ? (
          <p>
            <label for="share-link">
              Link ({made.access}, expires {new Date(made.expiresAt).toLocaleString()})
            </label>
            <input id="share-link" class="mono" readOnly value={shareLink(sessionId, made.token)} />
          </p>
        ) : null}
        <div class="actions">
          <button type="button" class="btn" onClick={() => dialog.current?.close()}>
            Close
          </button>
          {made ? (
            <button type="button" class="btn btn-danger" onClick={() => void revoke()}>
              Revoke link
            </button>
          ) : null}
          <button type="button" class="btn btn-primary" onClick={() => void create()}>
            Create link
          </button>
        </div>
      </dialog>
    </>
  );
}
