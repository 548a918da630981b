/** The session page's socket plumbing: per-process events for the panels, and the socket's badge. */
import type { ProcessNotification } from '../../../src/protocol/methods.ts';
import type { ProcessEvent } from '../process-stream.ts';
import type { Notification, SocketState } from '../socket.ts';

/** How process panels hear about the socket: per-process notifications, (re)opens and drops. */
export interface SessionEvents {
  subscribe(processId: string, fn: (e: ProcessEvent) => void): () => void;
  onOpen(fn: (reconnected: boolean) => void): () => void;
  onDrop(fn: () => void): () => void;
}

function isProcessNotification(n: Notification): n is ProcessNotification {
  return n.method.startsWith('process/');
}

export function createEvents(): SessionEvents & {
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

export function SocketBadge({ state }: { state: SocketState }) {
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
