/** The session's facts card: what it is (image, sandbox, policy, workspace, labels, age) and its live resource use. */
import type { SessionInfo } from '../api.ts';
import { approvalPolicy, bytes, cpu, duration, since } from '../format.ts';

/** The card: the facts, then the meters. */
export function SessionFacts({ s, now }: { s: SessionInfo; now: number }) {
  return (
    <section class="card" aria-labelledby="facts-title">
      <h2 id="facts-title">Session</h2>
      <FactList s={s} now={now} />
      <UsageMeters s={s} />
    </section>
  );
}

function FactList({ s, now }: { s: SessionInfo; now: number }) {
  return (
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
        {since(s.createdAt, now)} <span class="muted">· expires in {duration(Date.parse(s.expiresAt) - now)}</span>
      </dd>
    </dl>
  );
}

function UsageMeters({ s }: { s: SessionInfo }) {
  const u = s.usage;
  return (
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
  );
}

function Bar({ value, max }: { value: number; max: number }) {
  const pct = max > 0 ? Math.min(100, (value / max) * 100) : 0;
  return (
    <span class="meter-bar" aria-hidden="true">
      <span class="meter-fill" style={{ width: `${pct}%` }} />
    </span>
  );
}
