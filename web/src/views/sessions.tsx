/** The tenant's sessions with their live resource use, refreshed every two seconds. */
import { useState } from 'preact/hooks';
import type { Api, SessionInfo } from '../api.ts';
import { approvalPolicy, bytes, cpu, shortId, since } from '../format.ts';
import { useNow, usePoll } from '../hooks.ts';
import { type Column, DataTable } from './data-table.tsx';
import { Empty, ErrorState, Loading, Notice } from './states.tsx';

export function UsageCells({ s }: { s: SessionInfo }) {
  const u = s.usage;
  if (!u) {
    return (
      <td colSpan={3} class="muted">
        {s.status === 'dead' ? '—' : 'not reported'}
      </td>
    );
  }
  return (
    <>
      <td class="num" data-col="cpu">
        {cpu(u.cpuPercent)}
      </td>
      <td class="num" data-col="memory">
        {bytes(u.memoryBytes)}
        {u.memoryLimitBytes ? <span class="muted"> / {bytes(u.memoryLimitBytes)}</span> : null}
      </td>
      <td class="num" data-col="pids">
        {u.pids}
        {u.pidsLimit ? <span class="muted"> / {u.pidsLimit}</span> : null}
      </td>
    </>
  );
}

export function StatusBadge({ s }: { s: SessionInfo }) {
  if (s.status === 'dead') return <span class="badge badge-bad">dead</span>;
  return (
    <span class={`badge ${s.attached ? 'badge-good' : 'badge-idle'}`}>{s.attached ? 'alive · attached' : 'alive'}</span>
  );
}

export function Sessions({ api }: { api: Api }) {
  const [state, reload] = usePoll(() => api.sessions(), 2000, [api]);
  const [creating, setCreating] = useState<string | undefined>();
  const now = useNow();

  const create = async (): Promise<void> => {
    setCreating('');
    try {
      const s = await api.createSession({});
      location.hash = `#/sessions/${encodeURIComponent(s.sessionId)}`;
    } catch (err) {
      setCreating((err as Error).message);
    }
  };

  return (
    <section class="page" aria-labelledby="sessions-title">
      <div class="page-head">
        <h1 id="sessions-title">Sessions</h1>
        <button type="button" class="btn" onClick={() => void create()} disabled={creating === ''}>
          New session
        </button>
      </div>
      {creating ? <Notice tone="error">Could not create a session: {creating}</Notice> : null}
      {state.kind === 'loading' ? <Loading what="sessions" /> : null}
      {state.kind === 'failed' ? (
        <ErrorState title="The sessions could not be loaded" error={state.error} onRetry={reload} />
      ) : null}
      {state.kind === 'ready' ? (
        <>
          {state.error ? (
            <Notice tone="warn">Refresh failed ({state.error.message}); showing the last answer.</Notice>
          ) : null}
          {state.data.sessions.length === 0 ? (
            <Empty title="No sessions yet">
              Agents create sessions over the WebSocket protocol or <code>POST /v1/sessions</code>;{' '}
              <code>exec-server run</code> makes one too. Or press <em>New session</em>.
            </Empty>
          ) : (
            <SessionTable sessions={state.data.sessions} now={now} />
          )}
        </>
      ) : null}
    </section>
  );
}

const SESSION_COLUMNS: readonly Column[] = [
  { title: 'Session' },
  { title: 'State' },
  { title: 'Image · runtime' },
  { title: 'Sandbox' },
  { title: 'Approvals' },
  { title: 'Age' },
  { title: 'CPU', num: true },
  { title: 'Memory', num: true },
  { title: 'Pids', num: true },
  { title: 'Processes', num: true },
];

function SessionTable({ sessions, now }: { sessions: readonly SessionInfo[]; now: number }) {
  return (
    <DataTable label="Sessions" columns={SESSION_COLUMNS}>
      {sessions.map((s) => (
        <tr key={s.sessionId} data-session={s.sessionId}>
          <td>
            <a href={`#/sessions/${encodeURIComponent(s.sessionId)}`} class="mono" title={s.sessionId}>
              {shortId(s.sessionId)}
            </a>
          </td>
          <td>
            <StatusBadge s={s} />
          </td>
          <td>
            {s.image ?? <span class="muted">host</span>} <span class="muted">· {s.runtime ?? s.backend}</span>
          </td>
          <td>
            {s.sandbox.type} <span class="muted">({s.sandboxType})</span>
          </td>
          <td>{approvalPolicy(s.approvalPolicy)}</td>
          <td>{since(s.createdAt, now)}</td>
          <UsageCells s={s} />
          <td class="num">
            {s.runningProcesses} <span class="muted">/ {s.processes}</span>
          </td>
        </tr>
      ))}
    </DataTable>
  );
}
