/**
 * Follows the engine's event stream for this instance's containers, so a container that dies
 * or is removed from outside is noticed at once. The stream reconnects with backoff (engine
 * restarts, proxies); events missed meanwhile are replayed with `since`, and `onReconnect`
 * lets the backend re-inspect what it holds.
 */
import type { Readable } from 'node:stream';
import type Docker from 'dockerode';
import { LABEL } from '../container/labels.ts';
import type { DockerLogger } from '../options.ts';

/** An engine event of one of this instance's containers. */
export interface ContainerEvent {
  readonly containerId: string;
  /** `die`, `destroy`, `oom`, `kill`... */
  readonly action: string;
  readonly attributes: Readonly<Record<string, string>>;
}

/** Follows the engine's events for this instance's containers, reconnecting and replaying what it missed. */
export class EventWatcher {
  readonly #docker: Docker;
  readonly #instanceId: string;
  readonly #log: DockerLogger;
  readonly #onEvent: (e: ContainerEvent) => void;
  readonly #onReconnect: () => void;
  #stream: Readable | undefined;
  #stopped = false;
  #backoffMs = 250;
  #timer: NodeJS.Timeout | undefined;
  /** Unix seconds of the last event (or connection), for `since` on reconnect. */
  #since = Math.floor(Date.now() / 1000);
  #connectedOnce = false;

  constructor(
    docker: Docker,
    instanceId: string,
    log: DockerLogger,
    onEvent: (e: ContainerEvent) => void,
    onReconnect: () => void,
  ) {
    this.#docker = docker;
    this.#instanceId = instanceId;
    this.#log = log;
    this.#onEvent = onEvent;
    this.#onReconnect = onReconnect;
  }

  start(): void {
    this.#stopped = false;
    void this.#connect();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#stream?.destroy();
    this.#stream = undefined;
  }

  async #connect(): Promise<void> {
    if (this.#stopped) return;
    let stream: Readable;
    try {
      stream = (await this.#docker.getEvents({
        since: this.#since,
        filters: {
          type: ['container'],
          label: [`${LABEL.instance}=${this.#instanceId}`],
          event: ['die', 'destroy', 'oom'],
        },
      } as Docker.GetEventsOptions)) as Readable;
    } catch (err) {
      this.#log.debug({ err: (err as Error).message }, 'docker events: cannot connect');
      this.#retry();
      return;
    }
    if (this.#stopped) {
      stream.destroy();
      return;
    }
    // The event socket must not keep the server process alive on its own.
    (stream as Readable & { socket?: { unref(): void } }).socket?.unref();
    this.#stream = stream;
    this.#backoffMs = 250;
    if (this.#connectedOnce) {
      this.#log.info({}, 'docker events: reconnected');
      this.#onReconnect();
    }
    this.#connectedOnce = true;
    let rest = '';
    stream.on('data', (chunk: Buffer) => {
      rest += chunk.toString('utf8');
      for (let nl = rest.indexOf('\n'); nl >= 0; nl = rest.indexOf('\n')) {
        const line = rest.slice(0, nl).trim();
        rest = rest.slice(nl + 1);
        if (line !== '') this.#handle(line);
      }
    });
    const lost = (): void => {
      if (this.#stream !== stream) return;
      this.#stream = undefined;
      this.#retry();
    };
    stream.on('error', lost);
    stream.on('end', lost);
    stream.on('close', lost);
  }

  #handle(line: string): void {
    try {
      const e = JSON.parse(line) as {
        Action?: string;
        status?: string;
        id?: string;
        time?: number;
        Actor?: { ID?: string; Attributes?: Record<string, string> };
      };
      if (typeof e.time === 'number') this.#since = e.time;
      const id = e.Actor?.ID ?? e.id;
      const action = e.Action ?? e.status;
      if (id === undefined || action === undefined) return;
      this.#onEvent({ containerId: id, action, attributes: e.Actor?.Attributes ?? {} });
    } catch (err) {
      this.#log.warn({ err: (err as Error).message }, 'docker events: bad line');
    }
  }

  #retry(): void {
    if (this.#stopped) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#connect(), this.#backoffMs);
    this.#timer.unref();
    this.#backoffMs = Math.min(this.#backoffMs * 2, 5000);
  }
}
