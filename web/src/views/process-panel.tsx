/**
 * The live output of one process: its history, then its notifications, resumed from the last
 * seq after a reconnect (ProcessFollower). PTYs render in xterm.js, pipes as text.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { utf8Base64 } from '../bytes.ts';
import { ProcessFollower, type ProcessEnd, type ProcessEvent } from '../process-stream.ts';
import type { SessionSocket } from '../socket.ts';
import type { ProcessSummary } from '../../../src/protocol/process.ts';
import type { SessionEvents } from './session-events.tsx';
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

type Chunk = Uint8Array | string;
type Decoders = { stdout: TextDecoder; stderr: TextDecoder };
type Ref<T> = { current: T };

/** A piece of pipe output into the pipe view: a note as it is, bytes decoded per stream. */
function appendPipe(h: PipeHandle, decoders: Decoders, stream: string, data: Chunk): void {
  if (typeof data === 'string') h.append('note', data);
  else {
    const kind = stream === 'stderr' ? 'stderr' : 'stdout';
    h.append(kind, decoders[kind].decode(data, { stream: true }));
  }
}

/** Follows one process's output into `write` over `socket`, resyncing on every (re)open; returns the stop. */
function follow(o: {
  socket: SessionSocket;
  events: SessionEvents;
  processId: string;
  isPty: boolean;
  write: (stream: string, data: Chunk) => void;
  setEnd: (e: ProcessEnd) => void;
  setStatus: (s: string) => void;
  setLastSeq: (n: number) => void;
}): () => void {
  const { socket, events, processId, isPty, setStatus } = o;
  const note = (text: string): void => o.write('note', isPty ? `\r\n\x1b[2m${text}\x1b[0m\r\n` : `\n${text}\n`);
  const follower = new ProcessFollower(
    (afterSeq, maxBytes) => socket.request('process/read', { processId, afterSeq, maxBytes }),
    {
      output: (stream, data) => o.write(stream, data),
      dropped: (n) => note(`[${n} bytes of earlier output are no longer retained by the server]`),
      escalated: (reason) => note(`[sandbox denied (${reason}); running again without the sandbox]`),
      ended: (e) => o.setEnd(e),
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
      .finally(() => o.setLastSeq(follower.lastSeq));
  };
  const offEvent = events.subscribe(processId, (e: ProcessEvent) => {
    follower.notify(e);
    o.setLastSeq(follower.lastSeq);
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
}

/** The output of `proc` as it arrives, and the views' attach points (output before a view exists waits). */
function useProcessOutput(socket: SessionSocket, events: SessionEvents, proc: ProcessSummary) {
  const isPty = proc.mode === 'pty';
  const [end, setEnd] = useState<ProcessEnd | undefined>();
  const [status, setStatus] = useState<string>('loading output…');
  const [lastSeq, setLastSeq] = useState(0);
  const term = useRef<TerminalHandle | undefined>(undefined);
  const pipe = useRef<PipeHandle | undefined>(undefined);
  const decoders = useRef<Decoders>({ stdout: new TextDecoder(), stderr: new TextDecoder() });
  /** Output that arrived before the view's element existed. */
  const early = useRef<Array<[string, Chunk]>>([]);
  useEffect(() => {
    const write = (stream: string, data: Chunk): void => {
      const view: Ref<TerminalHandle | PipeHandle | undefined> = isPty ? term : pipe;
      if (!view.current) early.current.push([stream, data]);
      else if (isPty) term.current?.write(data);
      else if (pipe.current) appendPipe(pipe.current, decoders.current, stream, data);
    };
    return follow({ socket, events, processId: proc.processId, isPty, write, setEnd, setStatus, setLastSeq });
  }, [socket, proc.processId]);
  return {
    end,
    status,
    lastSeq,
    attachTerminal: (h: TerminalHandle | undefined): void => {
      term.current = h;
      if (h) for (const [, d] of early.current.splice(0)) h.write(d);
    },
    attachPipe: (h: PipeHandle | undefined): void => {
      pipe.current = h;
      if (h) for (const [stream, d] of early.current.splice(0)) appendPipe(h, decoders.current, stream, d);
    },
  };
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
  const { end, status, lastSeq, attachTerminal, attachPipe } = useProcessOutput(socket, events, proc);
  const lastSize = useRef<string>('');
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
