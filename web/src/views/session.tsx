/**
 * One session: its facts and live resource use (`session/info` over the observer socket),
 * its processes, pending approvals, the actions (start a shell, terminate, snapshot, delete),
 * and the output of the selected process.
 */
import type { RefObject } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { InitializeResult } from '../../../src/protocol/methods.ts';
import type { Static } from 'typebox';
import type { ProcessListResult, ProcessSummary } from '../../../src/protocol/process.ts';
import { type Api, isSessionToken, type SessionInfo } from '../api.ts';
import { shortId } from '../format.ts';
import { type Loaded, useNow, usePoll } from '../hooks.ts';
import { SessionSocket, type SocketState } from '../socket.ts';
import { Approvals } from './approvals.tsx';
import { ProcessPanel } from './process-panel.tsx';
import { ProcessTable } from './process-table.tsx';
import { createEvents, type SessionEvents, SocketBadge } from './session-events.tsx';
import { SessionFacts } from './session-facts.tsx';
import { StatusBadge } from './sessions.tsx';
import { ShareButton } from './share.tsx';
import { Empty, ErrorState, Loading, Notice } from './states.tsx';

export type { ProcessSummary, SessionEvents };

let shellCounter = 0;

type Events = ReturnType<typeof createEvents>;

/** The observer socket of the session: its state, the `initialize` answer, and how often it opened. */
function useSessionSocket(api: Api, sessionId: string, events: Events, onProcessEnd: () => void) {
  const [socket, setSocket] = useState<SessionSocket | undefined>();
  const [sockState, setSockState] = useState<SocketState>({ kind: 'connecting' });
  const [init, setInit] = useState<InitializeResult | undefined>();
  const [opens, setOpens] = useState(0);
  useEffect(() => {
    const s = new SessionSocket({
      sessionId,
      token: api.token,
      onState: (st) => {
        setSockState(st);
        if (st.kind === 'reconnecting' || st.kind === 'closed') events.dropped();
      },
      onNotification: (n) => {
        events.emit(n);
        if (n.method === 'process/exited' || n.method === 'process/escalated') onProcessEnd();
      },
      onOpen: (i, reconnected) => {
        setInit(i);
        setOpens((n) => n + 1);
        events.opened(reconnected);
      },
    });
    setSocket(s);
    return () => s.close();
  }, [sessionId, api]);
  return { socket, sockState, init, opens };
}

type ActionNotice = { tone: 'info' | 'error'; text: string };

/** The page's actions, each telling what it did (or why it failed) in one notice. */
function useSessionActions(o: {
  api: Api;
  sessionId: string;
  socket: SessionSocket | undefined;
  shellPath: string;
  select: (s: { id: string; interactive: boolean }) => void;
  reload: () => void;
}) {
  const [notice, setNotice] = useState<ActionNotice | undefined>();
  const [busy, setBusy] = useState(false);
  const act = async (what: string, work: () => Promise<string>): Promise<void> => {
    setBusy(true);
    setNotice(undefined);
    try {
      setNotice({ tone: 'info', text: await work() });
    } catch (err) {
      setNotice({ tone: 'error', text: `${what} failed: ${(err as Error).message}` });
    } finally {
      setBusy(false);
      o.reload();
    }
  };
  const connected = (): SessionSocket => {
    if (!o.socket) throw new Error('not connected');
    return o.socket;
  };
  return {
    notice,
    busy,
    startShell: (): Promise<void> =>
      act('Starting a shell', async () => {
        const processId = `shell-${(Date.now() % 1_000_000).toString(36)}${++shellCounter}`;
        // The person pressing the button is the approval of this start.
        await connected().request('process/start', {
          processId,
          argv: [o.shellPath, '-i'],
          tty: true,
          size: { cols: 100, rows: 30 },
          envPolicy: { inherit: 'core' },
          env: { TERM: 'xterm-256color' },
          approval: 'approved',
        });
        o.select({ id: processId, interactive: true });
        return `Started ${o.shellPath} as ${processId}.`;
      }),
    terminate: (processId: string): Promise<void> =>
      act('Terminating', async () => {
        const r = await connected().request('process/terminate', { processId });
        return r.running
          ? `Terminating ${processId} (SIGTERM, then SIGKILL after the grace period).`
          : `${processId} had already ended.`;
      }),
    snapshot: (): Promise<void> =>
      act('The snapshot', async () => {
        const snap = await o.api.snapshot(o.sessionId);
        return `Snapshot ${snap.snapshotId}${snap.name ? ` (${snap.name})` : ''} created.`;
      }),
    remove: (): Promise<void> =>
      act('Deleting the session', async () => {
        await o.api.deleteSession(o.sessionId);
        location.hash = '#/';
        return 'Session deleted.';
      }),
  };
}

type Actions = ReturnType<typeof useSessionActions>;

export function SessionView({ api, sessionId }: { api: Api; sessionId: string }) {
  const events = useMemo(createEvents, [sessionId]);
  const [selected, setSelected] = useState<{ id: string; interactive: boolean } | undefined>();
  const dialog = useRef<HTMLDialogElement>(null);
  const now = useNow();
  const { socket, sockState, init, opens } = useSessionSocket(api, sessionId, events, () => reloadProcs());
  const [info, reloadInfo] = usePoll<SessionInfo>(
    () => (socket?.ready ? socket.request('session/info', {}) : api.session(sessionId)),
    2000,
    [socket, opens],
    isNotFound,
  );
  const [procs, reloadProcs] = usePoll(
    () =>
      socket?.ready ? socket.request('process/list', {}) : Promise.reject(new Error('waiting for the connection')),
    1500,
    [socket, opens],
  );
  const actions = useSessionActions({
    api,
    sessionId,
    socket,
    shellPath: init?.environmentInfo.shell.path ?? '/bin/sh',
    select: setSelected,
    reload: () => {
      reloadProcs();
      reloadInfo();
    },
  });
  const ready = socket !== undefined && sockState.kind === 'open';
  const processes =
    procs.kind === 'ready' ? [...procs.data.processes].sort((a, b) => b.createdAtMs - a.createdAtMs) : [];
  const current = selected ? processes.find((p) => p.processId === selected.id) : undefined;

  if (info.kind === 'loading') return <Loading what="the session" />;
  if (info.kind === 'failed') return <SessionFailed error={info.error} onRetry={reloadInfo} />;
  // Deleted elsewhere while shown: the last answer is no longer true, so it is not kept on screen.
  if (info.error && isNotFound(info.error)) return <SessionFailed error={info.error} onRetry={reloadInfo} />;
  const s = info.data;
  return (
    <section class="page session" aria-labelledby="session-title">
      <p class="crumbs">
        <a href="#/">← Sessions</a>
      </p>
      <SessionHead
        s={s}
        api={api}
        sockState={sockState}
        ready={ready}
        snapshots={Boolean(init?.capabilities['snapshots'])}
        actions={actions}
        dialog={dialog}
      />
      <PageNotices action={actions.notice} refresh={info.error} sockState={sockState} />

      <div class="grid">
        <div class="col">
          <SessionFacts s={s} now={now} />
          <Approvals api={api} sessionId={sessionId} onDecided={reloadProcs} />
          <section class="card" aria-labelledby="procs-title">
            <h2 id="procs-title">Processes</h2>
            <ProcessesState procs={procs} empty={processes.length === 0} />
            <ProcessTable
              processes={processes}
              selectedId={selected?.id}
              now={now}
              canAct={ready && !actions.busy}
              onSelect={(id) => setSelected({ id, interactive: false })}
              onTerminate={(id) => void actions.terminate(id)}
            />
          </section>
        </div>
        <div class="col col-wide">
          <ProcessColumn socket={socket} events={events} proc={current} interactive={selected?.interactive ?? false} />
        </div>
      </div>
      <DeleteDialog dialog={dialog} s={s} onDelete={() => void actions.remove()} />
    </section>
  );
}

/** The title (id, status, socket) and the action buttons. */
function SessionHead(props: {
  s: SessionInfo;
  api: Api;
  sockState: SocketState;
  ready: boolean;
  snapshots: boolean;
  actions: Actions;
  dialog: RefObject<HTMLDialogElement | null>;
}) {
  const { s, api, actions } = props;
  const busy = actions.busy;
  return (
    <div class="page-head">
      <h1 id="session-title">
        Session{' '}
        <span class="mono" title={s.sessionId}>
          {shortId(s.sessionId)}
        </span>{' '}
        <StatusBadge s={s} /> <SocketBadge state={props.sockState} />
      </h1>
      <div class="actions">
        <button
          type="button"
          class="btn btn-primary"
          onClick={() => void actions.startShell()}
          disabled={!props.ready || busy || s.status === 'dead'}
        >
          Start shell
        </button>
        <button
          type="button"
          class="btn"
          onClick={() => void actions.snapshot()}
          disabled={busy || !props.snapshots || s.status === 'dead'}
          title={props.snapshots ? 'Commit the filesystem to an image' : 'Snapshots need the docker backend'}
        >
          Snapshot
        </button>
        <ShareButton api={api} sessionId={s.sessionId} disabled={isSessionToken(api.token)} />
        <button type="button" class="btn btn-danger" onClick={() => props.dialog.current?.showModal()} disabled={busy}>
          Delete
        </button>
      </div>
    </div>
  );
}

/** What the last action did, a failed refresh, a connection that ended. */
function PageNotices(props: { action: ActionNotice | undefined; refresh: Error | undefined; sockState: SocketState }) {
  const { action, refresh, sockState } = props;
  return (
    <>
      {action ? <Notice tone={action.tone}>{action.text}</Notice> : null}
      {refresh ? <Notice tone="warn">Refresh failed ({refresh.message}); showing the last answer.</Notice> : null}
      {sockState.kind === 'closed' ? <Notice tone="error">The live connection ended: {sockState.why}</Notice> : null}
    </>
  );
}

/** The selected process's panel, or a hint to pick one. */
function ProcessColumn(props: {
  socket: SessionSocket | undefined;
  events: Events;
  proc: ProcessSummary | undefined;
  interactive: boolean;
}) {
  const { socket, proc } = props;
  if (socket && proc)
    return (
      <ProcessPanel
        key={proc.processId}
        socket={socket}
        events={props.events}
        proc={proc}
        startInteractive={props.interactive}
      />
    );
  return (
    <section class="card panel">
      <Empty title="No process selected">Pick a process to follow its output, or start a shell.</Empty>
    </section>
  );
}

/** What the processes card says before it has a table: loading, waiting for the socket, none yet. */
function ProcessesState({ procs, empty }: { procs: Loaded<Static<typeof ProcessListResult>>; empty: boolean }) {
  if (procs.kind === 'loading') return <Loading what="processes" />;
  if (procs.kind === 'failed')
    return <Notice tone="warn">Processes are shown once the live connection is up ({procs.error.message}).</Notice>;
  if (empty)
    return <Empty title="No processes yet">Commands the agent starts appear here; or press Start shell.</Empty>;
  return null;
}

function DeleteDialog(props: { dialog: RefObject<HTMLDialogElement | null>; s: SessionInfo; onDelete: () => void }) {
  const close = () => props.dialog.current?.close();
  return (
    <dialog ref={props.dialog} class="dialog" aria-labelledby="delete-title">
      <h2 id="delete-title">Delete this session?</h2>
      <p>
        Its processes are killed and its workspace{props.s.containerId ? ' and container are' : ' is'} removed. This
        cannot be undone.
      </p>
      <div class="actions">
        <button type="button" class="btn" onClick={close}>
          Cancel
        </button>
        <button
          type="button"
          class="btn btn-danger"
          onClick={() => {
            close();
            props.onDelete();
          }}
        >
          Delete session
        </button>
      </div>
    </dialog>
  );
}

function SessionFailed({ error, onRetry }: { error: Error; onRetry: () => void }) {
  const gone = isNotFound(error);
  return (
    <section class="page">
      <p>
        <a href="#/">← Sessions</a>
      </p>
      <ErrorState
        title={
          gone
            ? 'This session does not exist (it was deleted, or belongs to another tenant)'
            : 'The session could not be loaded'
        }
        error={error}
        onRetry={gone ? undefined : onRetry}
      />
    </section>
  );
}

function isNotFound(error: Error): boolean {
  const e = error as { code?: string; status?: number };
  return e.code === 'EXEC_ERR_SESSION_NOT_FOUND' || e.status === 404;
}
