/**
 * The live output of one process: its history, then its notifications, resumed from the last
 * seq after a reconnect (ProcessFollower). PTYs render in xterm.js, pipes as text.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { utf8Base64 } from '../bytes.ts';
import { ProcessFollower, type ProcessEnd, type ProcessEvent } from '../process-stream.ts';
import type { SessionSocket } from '../socket.ts';
import type { ProcessSummary, SessionEvents } from './session.tsx';
import { PipeOutput, type PipeHandle } from './pipe-output.tsx';
import { TerminalView, type TerminalHandle } from './terminal.tsx';

export function endText(end: {
  exitCode: number | null;
  terminal: string | null;
  signal?: string | null;
  sandboxDenied: boolean;
}): string {
  const parts = [`exit ${end.exitCode ?? '?'}`, end.terminal ?? 'ended'];
  if (end.signal) parts.push(end.signal);
  if (end.sandboxDenied) parts.push('sandbox denied');
  return parts.join(' · ');
}

export function ProcessPanel({
  socket,
  events,
  proc,
  startInteractive,
}: {
  socket: SessionSocket;
  events: SessionEvents;
  proc: ProcessSummary;
  startInteractive: boolean;
}) {
  const isPty = proc.mode === 'pty';
  const [interactive, setInteractive] = useState(startInteractive && isPty);
  const [end, setEnd] = useState<ProcessEnd | undefined>();
  const [status, setStatus] = useState<string>('loading output…');
  const [lastSeq, setLastSeq] = useState(0);
  const term = useRef<TerminalHandle | undefined>(undefined);
  const pipe = useRef<PipeHandle | undefined>(undefined);
  const decoders = useRef({ stdout: new TextDecoder(), stderr: new TextDecoder() });
  /** Output that arrived before the view's element existed. */
  const early = useRef<Array<[string, Uint8Array | string]>>([]);
  const lastSize = useRef<string>('');

  useEffect(() => {
    const write = (stream: string, data: Uint8Array | string): void => {
      if (isPty) {
        if (term.current) term.current.write(data);
        else early.current.push([stream, data]);
        return;
      }
      if (!pipe.current) {
        early.current.push([stream, data]);
        return;
      }
      if (typeof data === 'string') pipe.current.append('note', data);
      else {
        const kind = stream === 'stderr' ? 'stderr' : 'stdout';
        pipe.current.append(kind, decoders.current[kind].decode(data, { stream: true }));
      }
    };
    const note = (text: string): void => write('note', isPty ? `\r\n\x1b[2m${text}\x1b[0m\r\n` : `\n${text}\n`);
    const follower = new ProcessFollower(
      (afterSeq, maxBytes) => socket.request('process/read', { processId: proc.processId, afterSeq, maxBytes }),
      {
        output: (stream, data) => write(stream, data),
        dropped: (n) => note(`[${n} bytes of earlier output are no longer retained by the server]`),
        escalated: (reason) => note(`[sandbox denied (${reason}); running again without the sandbox]`),
        ended: (e) => setEnd(e),
      },
    );
    const sync = (reconnected: boolean): void => {
      setStatus(reconnected ? 'reconnected: resuming…' : 'reading output…');
      const from = follower.lastSeq;
      follower
        .sync()
        .then(() => setStatus(reconnected ? `live · resumed after seq ${from}` : 'live'))
        .catch((err: Error & { code?: string }) => {
          // A process still waiting for its approval has no output yet: try again shortly.
          if (err.code === 'EXEC_ERR_PROCESS_STARTING') {
            setStatus('waiting for approval…');
            setTimeout(() => socket.ready && sync(false), 500);
          } else setStatus(`output unavailable: ${err.message}`);
        })
        .finally(() => setLastSeq(follower.lastSeq));
    };
    const offEvent = events.subscribe(proc.processId, (e: ProcessEvent) => {
      follower.notify(e);
      setLastSeq(follower.lastSeq);
    });
    const offOpen = events.onOpen((reconnected) => sync(reconnected));
    const offDrop = events.onDrop(() => setStatus(`connection lost: output resumes from seq ${follower.lastSeq}`));
    if (socket.ready) sync(false);
    return () => {
      follower.stop();
      offEvent();
      offOpen();
      offDrop();
    };
  }, [socket, proc.processId]);

  const attachTerminal = (h: TerminalHandle | undefined): void => {
    term.current = h;
    if (h) for (const [, d] of early.current.splice(0)) h.write(d);
  };
  const attachPipe = (h: PipeHandle | undefined): void => {
    pipe.current = h;
    if (h)
      for (const [s, d] of early.current.splice(0)) {
        if (typeof d === 'string') h.append('note', d);
        else {
          const kind = s === 'stderr' ? 'stderr' : 'stdout';
          h.append(kind, decoders.current[kind].decode(d, { stream: true }));
        }
      }
  };

  const send = (data: string): void => {
    void socket.request('process/write', { processId: proc.processId, chunk: utf8Base64(data) }).catch(() => undefined);
  };
  const resize = (cols: number, rows: number): void => {
    const key = `${cols}x${rows}`;
    if (key === lastSize.current || end) return;
    lastSize.current = key;
    void socket.request('process/resize', { processId: proc.processId, cols, rows }).catch(() => undefined);
  };

  return (
    <section class="card panel" aria-labelledby="panel-title" data-process={proc.processId}>
      <div class="panel-head">
        <h2 id="panel-title">
          <span class="mono">{proc.processId}</span> <code class="argv muted">{proc.argv.join(' ')}</code>
        </h2>
        <div class="panel-tools">
          <span class="muted small" data-testid="stream-status" data-seq={lastSeq}>
            {end ? endText(end) : status}
          </span>
          {isPty ? (
            <button
              type="button"
              class={`btn ${interactive && !end ? 'btn-warn' : ''}`}
              aria-pressed={interactive && !end}
              onClick={() => setInteractive(!interactive)}
              disabled={end !== undefined}
            >
              {end ? 'Ended' : interactive ? 'Interactive: on' : 'Read-only'}
            </button>
          ) : null}
        </div>
      </div>
      {isPty ? (
        <>
          <p class="muted small">
            {end
              ? 'The process has ended; its output stays readable here.'
              : interactive
                ? 'Keystrokes go to the process; the terminal size follows this panel.'
                : 'Read-only: press the button to type into this terminal.'}
          </p>
          <TerminalView
            interactive={interactive && end === undefined}
            onInput={send}
            onResize={resize}
            handle={attachTerminal}
          />
        </>
      ) : (
        <>
          <p class="muted small legend">
            <span class="out-stdout">stdout</span> · <span class="out-stderr">stderr</span>
          </p>
          <PipeOutput handle={attachPipe} />
        </>
      )}
    </section>
  );
}
