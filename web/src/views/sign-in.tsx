/** Sign-in with a tenant token; the token is checked against the API before it is kept. */
import { useState } from 'preact/hooks';
import { Api, type ApiError } from '../api.ts';

export function SignIn({ onSignIn, reason }: { onSignIn: (token: string) => void; reason?: string | undefined }) {
  const [token, setToken] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>(reason);

  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await new Api(token.trim()).sessions();
      onSignIn(token.trim());
    } catch (err) {
      const e2 = err as ApiError;
      setError(e2.status === 401 ? 'This token is not accepted by the server.' : e2.message);
    } finally {
      setBusy(false);
    }
  };

  return (
    <main class="signin">
      <form class="card signin-card" onSubmit={(e) => void submit(e)} aria-labelledby="signin-title">
        <h1 id="signin-title">exec-server console</h1>
        <p class="muted">
          Sign in with your tenant token. It is kept in this tab only (session storage) and sent as a bearer token.
        </p>
        <label for="token">Tenant token</label>
        <input
          id="token"
          name="token"
          type="password"
          autocomplete="off"
          spellcheck={false}
          value={token}
          onInput={(e) => setToken((e.target as HTMLInputElement).value)}
          // biome-ignore lint/a11y/noAutofocus: the page's one field (docs/console.md: the token field has focus on load, Enter signs in)
          autoFocus
        />
        {error ? (
          <p class="field-error" role="alert">
            {error}
          </p>
        ) : null}
        <button type="submit" class="btn btn-primary" disabled={busy}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
        <p class="muted small">A server started without tokens (loopback development) accepts an empty token.</p>
      </form>
    </main>
  );
}
