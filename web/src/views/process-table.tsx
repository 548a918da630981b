/** The session's processes as a table: select one to follow it, terminate a running one. */
import type { ProcessSummary } from '../../../src/protocol/process.ts';
import { duration, time } from '../format.ts';
import { type Column, DataTable } from './data-table.tsx';
import { endText } from './process-panel.tsx';

export interface ProcessTableProps {
  readonly processes: readonly ProcessSummary[];
  readonly selectedId: string | undefined;
  readonly now: number;
  /** Whether Terminate can be pressed (the socket is open, no action under way). */
  readonly canAct: boolean;
  readonly onSelect: (processId: string) => void;
  readonly onTerminate: (processId: string) => void;
}

const PROCESS_COLUMNS: readonly Column[] = [
  { title: 'Process' },
  { title: 'Command' },
  { title: 'State' },
  { title: 'Started · duration' },
  { title: 'Actions', hidden: true },
];

/** The table, or nothing while there is no process. */
export function ProcessTable(props: ProcessTableProps) {
  if (props.processes.length === 0) return null;
  return (
    <DataTable label="Processes" columns={PROCESS_COLUMNS}>
      {props.processes.map((p) => (
        <ProcessRow key={p.processId} p={p} {...props} />
      ))}
    </DataTable>
  );
}

function ProcessRow({ p, selectedId, now, canAct, onSelect, onTerminate }: ProcessTableProps & { p: ProcessSummary }) {
  const running = p.status === 'running' || p.status === 'starting';
  const isSelected = selectedId === p.processId;
  return (
    <tr data-process={p.processId} class={isSelected ? 'selected' : ''}>
      <td>
        <button
          type="button"
          class="link mono"
          title={p.processId}
          onClick={() => onSelect(p.processId)}
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
        <span class={`badge ${running ? 'badge-good' : p.exitCode === 0 ? 'badge-idle' : 'badge-bad'}`}>
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
        {time(p.createdAtMs)} <span class="muted">· {duration((p.endedAtMs ?? now) - p.createdAtMs)}</span>
      </td>
      <td>
        {running ? (
          <button
            type="button"
            class="btn btn-small btn-danger"
            onClick={() => onTerminate(p.processId)}
            disabled={!canAct}
          >
            Terminate
          </button>
        ) : null}
      </td>
    </tr>
  );
}
