/**
 * One session: its facts and live resource use (`session/info` over the observer socket),
 * its processes, pending approvals, the actions (start a shell, terminate, snapshot, delete),
 * and the output of the selected process.
 */
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { InitializeResult, ProcessNotification } from '../../../src/protocol/methods.ts';
import type { ProcessSummary } from '../../../src/protocol/process.ts';
import { type Api, isSessionToken, type SessionInfo } from '../api.ts';
import { approvalPolicy, bytes, cpu, duration, shortId, since, time } from '../format.ts';
import { useNow, usePoll } from '../hooks.ts';
import type { ProcessEvent } from '../process-stream.ts';
import { SessionSocket, type Notification, type SocketState } from '../socket.ts';
import { Approvals } from './approvals.tsx';
import { endText, ProcessPanel } from './process-panel.tsx';
import { StatusBadge } from './sessions.tsx';
import { ShareButton } from './share.tsx';
import { Empty, ErrorState, Loading, Notice } from './states.tsx';

export type { ProcessSummary };

/** How process panels hear about the socket: per-process notifications, (re)opens and drops. */
export interface SessionEvents {
  subscribe(processId: string, fn: (e: ProcessEvent) => void): () => void;
  onOpen(fn: (reconnected: boolean) => void): () => void;
  onDrop(fn: () => void): () => void;
}

function isProcessNotification(n: Notification): n is ProcessNotification {
  return n.method.startsWith('process/');
}

function createEvents(): SessionEvents & {
  emit(n: Notification): void;
  opened(reconnected: boolean): void;
  dropped(): void;
} {
  const byProcess = new Map<string, Set<(e: ProcessEvent) => void>>();
  const opens = new Set<(reconnected: boolean) => void>();
  const drops = new Set<() => void>();
  const add = <T,>(set: Set<T>, fn: T): (() => void) => {
    set.add(fn);
    return () => void set.delete(fn);
  };
  return {
    subscribe(processId, fn) {
      let set = byProcess.get(processId);
      if (!set) {
        set = new Set();
        byProcess.set(processId, set);
      }
      return add(set, fn);
    },
    onOpen: (fn) => add(opens, fn),
    onDrop: (fn) => add(drops, fn),
    emit(n) {
      if (!isProcessNotification(n)) return;
      const event = { method: n.method, ...n.params } as ProcessEvent;
      for (const fn of byProcess.get(n.params.processId) ?? []) fn(event);
    },
    opened(r) {
      for (const fn of [...opens]) fn(r);
    },
    dropped() {
      for (const fn of [...drops]) fn();
    },
  };
}

function SocketBadge({ state }: { state: SocketState }) {
  switch (state.kind) {
    case 'connecting':
      return (
        <span class="badge badge-idle" data-testid="socket">
          connecting…
        </span>
      );
    case 'open':
      return (
        <span class="badge badge-good" data-testid="socket">
          live{state.reconnects > 0 ? ` · reconnected ${state.reconnects}×` : ''}
        </span>
      );
    case 'reconnecting':
      return (
        <span class="badge badge-warn" data-testid="socket">
          reconnecting ({state.why})…
        </span>
      );
    case 'closed':
      return (
        <span class="badge badge-bad" data-testid="socket">
          disconnected
        </span>
      );
  }
}

let shellCounter = 0;

export function SessionView({ api, sessionId }: { api: Api; sessionId: string }) {
  const events = useMemo(createEvents, [sessionId]);
  const [socket, setSocket] = useState<SessionSocket | undefined>();
  const [sockState, setSockState] = useState<SocketState>({ kind: 'connecting' });
  const [init, setInit] = useState<InitializeResult | undefined>();
  const [opens, setOpens] = useState(0);
  const [selected, setSelected] = useState<{ id: string; interactive: boolean } | undefined>();
  const [notice, setNotice] = useState<{ tone: 'info' | 'error'; text: string } | undefined>();
  const [busy, setBusy] = useState(false);
  const dialog = useRef<HTMLDialogElement>(null);
  const now = useNow();

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
        if (n.method === 'process/exited' || n.method === 'process/escalated') reloadProcs();
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

  const ready = socket !== undefined && sockState.kind === 'open';
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

  const capabilities = init?.capabilities ?? {};
  const shellPath = init?.environmentInfo.shell.path ?? '/bin/sh';

  const act = async (what: string, work: () => Promise<string>): Promise<void> => {
    setBusy(true);
    setNotice(undefined);
    try {
      setNotice({ tone: 'info', text: await work() });
    } catch (err) {
      setNotice({ tone: 'error', text: `${what} failed: ${(err as Error).message}` });
    } finally {
      setBusy(false);
      reloadProcs();
      reloadInfo();
    }
  };

  const startShell = (): Promise<void> =>
    act('Starting a shell', async () => {
      if (!socket) throw new Error('not connected');
      const processId = `shell-${(Date.now() % 1_000_000).toString(36)}${++shellCounter}`;
      // The person pressing the button is the approval of this start.
      await socket.request('process/start', {
        processId,
        argv: [shellPath, '-i'],
        tty: true,
        size: { cols: 100, rows: 30 },
        envPolicy: { inherit: 'core' },
        env: { TERM: 'xterm-256color' },
        approval: 'approved',
      });
      setSelected({ id: processId, interactive: true });
      return `Started ${shellPath} as ${processId}.`;
    });
  const terminate = (processId: string): Promise<void> =>
    act('Terminating', async () => {
      if (!socket) throw new Error('not connected');
      const r = await socket.request('process/terminate', { processId });
      return r.running
        ? `Terminating ${processId} (SIGTERM, then SIGKILL after the grace period).`
        : `${processId} had already ended.`;
    });
  const snapshot = (): Promise<void> =>
    act('The snapshot', async () => {
      const snap = await api.snapshot(sessionId);
      return `Snapshot ${snap.snapshotId}${snap.name ? ` (${snap.name})` : ''} created.`;
    });
  const remove = async (): Promise<void> => {
    dialog.current?.close();
    await act('Deleting the session', async () => {
      await api.deleteSession(sessionId);
      location.hash = '#/';
      return 'Session deleted.';
    });
  };

  const processes =
    procs.kind === 'ready' ? [...procs.data.processes].sort((a, b) => b.createdAtMs - a.createdAtMs) : [];
  const current = selected ? processes.find((p) => p.processId === selected.id) : undefined;

  if (info.kind === 'loading') return <Loading what="the session" />;
  if (info.kind === 'failed') return <SessionFailed error={info.error} onRetry={reloadInfo} />;
  // Deleted elsewhere while shown: the last answer is no longer true, so it is not kept on screen.
  if (info.error && isNotFound(info.error)) return <SessionFailed error={info.error} onRetry={reloadInfo} />;
  const s = info.data;
  const u = s.usage;
  return (
    <section class="page session" aria-labelledby="session-title">
      <p class="crumbs">
        <a href="#/">← Sessions</a>
      </p>
      <div class="page-head">
        <h1 id="session-title">
          Session{' '}
          <span class="mono" title={s.sessionId}>
            {shortId(s.sessionId)}
          </span>{' '}
          <StatusBadge s={s} /> <SocketBadge state={sockState} />
        </h1>
        <div class="actions">
          <button
            type="button"
            class="btn btn-primary"
            onClick={() => void startShell()}
            disabled={!ready || busy || s.status === 'dead'}
          >
            Start shell
          </button>
          <button
            type="button"
            class="btn"
            onClick={() => void snapshot()}
            disabled={busy || !capabilities['snapshots'] || s.status === 'dead'}
            title={
              capabilities['snapshots'] ? 'Commit the filesystem to an image' : 'Snapshots need the docker backend'
            }
          >
            Snapshot
          </button>
          <ShareButton api={api} sessionId={s.sessionId} disabled={isSessionToken(api.token)} />
          <button type="button" class="btn btn-danger" onClick={() => dialog.current?.showModal()} disabled={busy}>
            Delete
          </button>
        </div>
      </div>
      {notice ? <Notice tone={notice.tone}>{notice.text}</Notice> : null}
      {info.error ? <Notice tone="warn">Refresh failed ({info.error.message}); showing the last answer.</Notice> : null}
      {sockState.kind === 'closed' ? <Notice tone="error">The live connection ended: {sockState.why}</Notice> : null}

      <div class="grid">
        <div class="col">
          <section class="card" aria-labelledby="facts-title">
            <h2 id="facts-title">Session</h2>
            <dl class="facts">
              <dt>Id</dt>
              <dd class="mono">{s.sessionId}</dd>
              <dt>Image · runtime</dt>
              <dd>
                {s.image ?? 'host (local backend)'} · {s.runtime ?? s.backend}
              </dd>
              <dt>Sandbox</dt>
              <dd>
                {s.sandbox.type}
                {'networkAccess' in s.sandbox && s.sandbox.networkAccess ? ' + network' : ''}{' '}
                <span class="muted">({s.sandboxType})</span>
                {s.sandboxUnavailableReason ? <div class="muted small">{s.sandboxUnavailableReason}</div> : null}
              </dd>
              <dt>Approvals</dt>
              <dd>
                {approvalPolicy(s.approvalPolicy)} <span class="muted">· denials handled by {s.denialHandling}</span>
              </dd>
              {s.execPath ? (
                <>
                  <dt>Commands run</dt>
                  <dd>
                    {s.execPath === 'agent' ? 'through the exec agent' : 'one engine exec each'}
                    {s.execPathReason ? <span class="muted"> ({s.execPathReason})</span> : null}
                  </dd>
                </>
              ) : null}
              <dt>Workspace</dt>
              <dd class="mono">{s.workdir}</dd>
              {Object.keys(s.labels).length > 0 ? (
                <>
                  <dt>Labels</dt>
                  <dd>
                    {Object.entries(s.labels).map(([k, v]) => (
                      <span key={k} class="badge badge-idle">
                        {k}={v}
                      </span>
                    ))}
                  </dd>
                </>
              ) : null}
              <dt>Age</dt>
              <dd>
                {since(s.createdAt, now)}{' '}
                <span class="muted">· expires in {duration(Date.parse(s.expiresAt) - now)}</span>
              </dd>
            </dl>
            <section class="usage" aria-label="Resource use" data-testid="usage">
              <div class="meter">
                <span class="meter-label">CPU</span>
                <span class="meter-value" data-col="cpu">
                  {u ? cpu(u.cpuPercent) : '—'}
                </span>
                <Bar value={u?.cpuPercent ?? 0} max={100} />
              </div>
              <div class="meter">
                <span class="meter-label">Memory</span>
                <span class="meter-value" data-col="memory">
                  {u ? bytes(u.memoryBytes) : '—'}
                  {u?.memoryLimitBytes ? <span class="muted"> / {bytes(u.memoryLimitBytes)}</span> : null}
                </span>
                <Bar value={u?.memoryBytes ?? 0} max={u?.memoryLimitBytes ?? 0} />
              </div>
              <div class="meter">
                <span class="meter-label">Pids</span>
                <span class="meter-value" data-col="pids">
                  {u ? u.pids : '—'}
                  {u?.pidsLimit ? <span class="muted"> / {u.pidsLimit}</span> : null}
                </span>
                <Bar value={u?.pids ?? 0} max={u?.pidsLimit ?? 0} />
              </div>
              {!u ? (
                <p class="muted small">
                  {s.status === 'dead' ? 'The session is dead.' : 'This backend reports no resource use.'}
                </p>
              ) : null}
            </section>
          </section>

          <Approvals api={api} sessionId={sessionId} onDecided={reloadProcs} />

          <section class="card" aria-labelledby="procs-title">
            <h2 id="procs-title">Processes</h2>
            {procs.kind === 'loading' ? <Loading what="processes" /> : null}
            {procs.kind === 'failed' ? (
              <Notice tone="warn">Processes are shown once the live connection is up ({procs.error.message}).</Notice>
            ) : null}
            {procs.kind === 'ready' && processes.length === 0 ? (
              <Empty title="No processes yet">Commands the agent starts appear here; or press Start shell.</Empty>
            ) : null}
            {processes.length > 0 ? (
              <div class="table-wrap">
                <table class="table" aria-label="Processes">
                  <thead>
                    <tr>
                      <th scope="col">Process</th>
                      <th scope="col">Command</th>
                      <th scope="col">State</th>
                      <th scope="col">Started · duration</th>
                      <th scope="col">
                        <span class="sr-only">Actions</span>
                      </th>
                    </tr>
                  </thead>
                  <tbody>
                    {processes.map((p) => {
                      const running = p.status === 'running' || p.status === 'starting';
                      const isSelected = selected?.id === p.processId;
                      return (
                        <tr key={p.processId} data-process={p.processId} class={isSelected ? 'selected' : ''}>
                          <td>
                            <button
                              type="button"
                              class="link mono"
                              title={p.processId}
                              onClick={() => setSelected({ id: p.processId, interactive: false })}
                              aria-pressed={isSelected}
                            >
                              {p.processId}
                            </button>
                            <div class="muted small">{p.mode === 'pty' ? 'pty' : 'pipe'}</div>
                          </td>
                          <td>
                            <code class="argv" title={p.argv.join(' ')}>
                              {p.argv.join(' ')}
                            </code>
                          </td>
                          <td data-col="state">
                            <span
                              class={`badge ${running ? 'badge-good' : p.exitCode === 0 ? 'badge-idle' : 'badge-bad'}`}
                            >
                              {running
                                ? p.status
                                : endText({
                                    exitCode: p.exitCode,
                                    terminal: p.status,
                                    sandboxDenied: p.sandboxDenied ?? false,
                                  })}
                            </span>
                          </td>
                          <td class="nowrap">
                            {time(p.createdAtMs)}{' '}
                            <span class="muted">· {duration((p.endedAtMs ?? now) - p.createdAtMs)}</span>
                          </td>
                          <td>
                            {running ? (
                              <button
                                type="button"
                                class="btn btn-small btn-danger"
                                onClick={() => void terminate(p.processId)}
                                disabled={!ready || busy}
                              >
                                Terminate
                              </button>
                            ) : null}
                          </td>
                        </tr>
                      );
                    })}
                  </tbody>
                </table>
              </div>
            ) : null}
          </section>
        </div>
        <div class="col col-wide">
          {socket && current ? (
            <ProcessPanel
              key={current.processId}
              socket={socket}
              events={events}
              proc={current}
              startInteractive={selected?.interactive ?? false}
            />
          ) : (
            <section class="card panel">
              <Empty title="No process selected">Pick a process to follow its output, or start a shell.</Empty>
            </section>
          )}
        </div>
      </div>

      <dialog ref={dialog} class="dialog" aria-labelledby="delete-title">
        <h2 id="delete-title">Delete this session?</h2>
        <p>
          Its processes are killed and its workspace{s.containerId ? ' and container are' : ' is'} removed. This cannot
          be undone.
        </p>
        <div class="actions">
          <button type="button" class="btn" onClick={() => dialog.current?.close()}>
            Cancel
          </button>
          <button type="button" class="btn btn-danger" onClick={() => void remove()}>
            Delete session
          </button>
        </div>
      </dialog>
    </section>
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

function Bar({ value, max }: { value: number; max: number }) {
  const pct = max > 0 ? Math.min(100, (value / max) * 100) : 0;
  return (
    <span class="meter-bar" aria-hidden="true">
      <span class="meter-fill" style={{ width: `${pct}%` }} />
    </span>
  );
}
