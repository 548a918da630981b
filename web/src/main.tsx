/**
 * The console's shell: sign-in, the hash router (`#/` sessions, `#/sessions/ID` one session)
 * and the header. The token lives in this tab's sessionStorage only: never in a cookie, and in
 * the URL only as a share link's fragment (`#/share/ID/TOKEN`, views/share.tsx), which is taken
 * into storage and out of the address bar before anything renders. A session token shows its
 * one session, without the sessions list it may not read.
 */
import '@xterm/xterm/css/xterm.css';
import './styles.css';
import { render } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { Api, isSessionToken } from './api.ts';
import { SessionView } from './views/session.tsx';
import { Sessions } from './views/sessions.tsx';
import { SignIn } from './views/sign-in.tsx';

const TOKEN_KEY = 'exec-server.console.token';

function readToken(): string | undefined {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  } catch {
    return undefined;
  }
}

/** A share link's token goes to storage, and its fragment becomes the session's page. */
function takeSharedToken(): void {
  const m = /^#\/share\/([^/]+)\/([^/]+)$/.exec(location.hash);
  if (!m?.[1] || !m[2]) return;
  try {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[2]));
  } catch {
    return;
  }
  history.replaceState(null, '', `${location.pathname}#/sessions/${m[1]}`);
}
takeSharedToken();

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = (): void => setHash(location.hash);
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return hash;
}

function App() {
  const [token, setToken] = useState<string | undefined>(readToken);
  const [signedOut, setSignedOut] = useState<string | undefined>();
  const hash = useHash();
  // A 401 on any call means the token is no longer good (the server restarted with other tokens).
  const api = useMemo(
    () => (token === undefined ? undefined : new Api(token, () => signOut('The server no longer accepts this token.'))),
    [token],
  );

  const signIn = (t: string): void => {
    sessionStorage.setItem(TOKEN_KEY, t);
    setSignedOut(undefined);
    setToken(t);
  };
  const signOut = (why?: string): void => {
    sessionStorage.removeItem(TOKEN_KEY);
    setSignedOut(why);
    setToken(undefined);
  };

  if (api === undefined) return <SignIn onSignIn={signIn} reason={signedOut} />;
  const m = /^#\/sessions\/([^/]+)$/.exec(hash);
  const scoped = isSessionToken(api.token);
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="bar">
        <a href="#/" class="brand">
          exec-server <span class="muted">console</span>
        </a>
        {scoped ? (
          <span class="muted">shared session</span>
        ) : (
          <nav aria-label="Main">
            <a href="#/" aria-current={m ? undefined : 'page'}>
              Sessions
            </a>
          </nav>
        )}
        <button type="button" class="btn btn-ghost" onClick={() => signOut()}>
          Sign out
        </button>
      </header>
      <main id="main">
        {m?.[1] ? <SessionView key={m[1]} api={api} sessionId={decodeURIComponent(m[1])} /> : <Sessions api={api} />}
      </main>
    </>
  );
}

const root = document.getElementById('app');
if (root) render(<App />, root);
