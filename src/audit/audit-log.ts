/**
 * The audit log (`--audit-log PATH`, `-` for standard output): one JSON object a line saying who
 * (tenant, principal, remote address) did what (action, detail) to which session, when. Lines
 * form a hash chain: each carries `prev`, the SHA-256 (hex) of the line before it, from a first
 * `audit.start` line naming the server and time, so `exec-server audit verify` (verify.ts) finds
 * the first line edited, removed or reordered. A restarted server appends: its `audit.start`
 * chains to the last complete line already there and declares a line torn by a crash after it
 * (log-file.ts). A line is at most `MAX_LINE_BYTES` (line-bound.ts); a file log has one writer
 * process (log-lock.ts).
 *
 * Writes are queued (at most `--audit-queue-lines`) and written in order by one writer. When the
 * queue is full, new events are dropped and counted; the next line that fits is `audit.dropped`
 * with that count, so the gap is itself in the chain. A failed write is retried every second,
 * its lines kept; the bytes of a write that failed part-way (disk full) are cut first, so a full
 * disk never glues two lines into what verify would call an edit (log-file.ts). Either way the
 * operator sees it: `/readyz` fails (notReadyReason), and `exec_server_audit_healthy` is 0 with
 * `exec_server_audit_dropped_total` / `exec_server_audit_write_errors_total` counting. Never
 * silent. While the log is healthy, answers wait for the lines recorded before them
 * (`settled`, audit-barrier.ts), as Kubernetes' blocking audit mode does; a failing log holds
 * nothing up. A file log is rotated by size (`maxFileBytes`, log-file.ts): the chain goes on in
 * the new file, whose first line is `audit.rotate`, so `audit verify` checks the files one by one
 * or together.
 */
import { createHash } from 'node:crypto';
import { Counter, Gauge } from 'prom-client';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { actorStore, type AuditEvent, type Auditor } from './auditor.ts';
import { boundedLine } from './line-bound.ts';
import { openLogFile, type Sink } from './log-file.ts';

const sha256 = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

const NEWLINE = Buffer.from('\n');

const RETRY_MS = 1000;

/** In the queue, where the file is rotated: the lines before it go to the old file. */
const ROTATE = Symbol('rotate');

export interface AuditLogOptions {
  /**
   * Standard output only: queue lines without writing them until `release()`, so that the
   * server's `ws://HOST:PORT` line stays the first line of its standard output.
   */
  readonly holdStdout?: boolean | undefined;
  readonly server: string;
  readonly version: string;
  readonly maxQueueLines: number;
  /** A file log is rotated before a line would take it past this many bytes; 0 never. */
  readonly maxFileBytes?: number | undefined;
  /** Rotated files kept (`PATH.1`...); 0 keeps all. */
  readonly maxFiles?: number | undefined;
  readonly metrics: Metrics;
  readonly log: Logger;
}

function stdoutSink(): Sink {
  return {
    write: (bytes) =>
      new Promise((resolve, reject) => process.stdout.write(bytes, (err) => (err ? reject(err) : resolve()))),
    close: async () => undefined,
  };
}

export class AuditLog implements Auditor {
  readonly enabled = true;
  readonly #sink: Sink;
  readonly #opts: AuditLogOptions;
  readonly #queue: (Buffer | typeof ROTATE)[] = [];
  #prev: string | null;
  #seq: number;
  #dropped = 0;
  #writing: Promise<void> | undefined;
  #failure: string | undefined;
  #held: boolean;
  #closed = false;
  /** Bytes in the current file once the queue is written, and where it is rotated (0 never). */
  #fileBytes = 0;
  #maxFileBytes = 0;
  /** Lines queued and lines written since the start, for `settled`. */
  #enqueued = 0;
  #written = 0;
  /** `settled` callers, each waiting for the lines up to its count; one promise per count. */
  readonly #waiters: { upTo: number; promise: Promise<void>; resolve: () => void }[] = [];
  readonly #healthy: Gauge;
  readonly #droppedTotal: Counter;
  readonly #writeErrors: Counter;
  readonly #lines: Counter;

  private constructor(sink: Sink, last: Buffer | undefined, opts: AuditLogOptions) {
    this.#sink = sink;
    this.#opts = opts;
    this.#held = false;
    this.#prev = last === undefined ? null : sha256(last);
    this.#seq = 0;
    if (last !== undefined) {
      try {
        const seq = (JSON.parse(last.toString('utf8')) as { seq?: unknown }).seq;
        if (typeof seq === 'number') this.#seq = seq + 1;
      } catch {
        // Not an audit line (the file was edited): the chain goes on from its hash; verify names it.
      }
    }
    const registers = [opts.metrics.registry];
    this.#healthy = new Gauge({
      name: 'exec_server_audit_healthy',
      help: '1 while every audit event is written; 0 after a dropped event or while writes fail',
      registers,
    });
    this.#droppedTotal = new Counter({
      name: 'exec_server_audit_dropped_total',
      help: 'Audit events dropped because the write queue was full',
      registers,
    });
    this.#writeErrors = new Counter({
      name: 'exec_server_audit_write_errors_total',
      help: 'Failed writes of the audit log (retried)',
      registers,
    });
    this.#lines = new Counter({ name: 'exec_server_audit_lines_total', help: 'Audit lines written', registers });
    this.#healthy.set(1);
  }

  /**
   * Opens (appends to) `path`, or standard output for `-`, and writes the chain's `audit.start`
   * line, which goes on from the last complete line and declares a torn one after it (length and
   * SHA-256 of its bytes), so that `audit verify` tells a crash from an edit.
   */
  static async open(path: string, opts: AuditLogOptions): Promise<AuditLog> {
    const { sink, last, torn, size, afterRotation } =
      path === '-'
        ? { sink: stdoutSink(), last: undefined, torn: undefined, size: 0, afterRotation: false }
        : await openLogFile(path, opts.maxFiles);
    const log = new AuditLog(sink, last, opts);
    log.#held = path === '-' && opts.holdStdout === true;
    // After a torn line the first write starts with a newline of its own (log-file.ts).
    log.#fileBytes = size + (torn === undefined ? 0 : 1);
    log.#maxFileBytes = sink.rotate === undefined ? 0 : (opts.maxFileBytes ?? 0);
    // A new file after a rotation starts with `audit.rotate`, whoever writes its first line.
    if (afterRotation) log.#push(log.#format(log.#rotation()));
    const detail: Record<string, unknown> = {
      server: opts.server,
      version: opts.version,
      pid: process.pid,
      continues: last !== undefined,
    };
    if (torn !== undefined) detail['torn'] = { bytes: torn.length, sha256: sha256(torn) };
    log.record({ action: 'audit.start', actor: { principal: 'server' }, detail });
    return log;
  }

  /** Why the server is not ready because of the audit log; undefined while it is healthy. */
  notReadyReason(): string | undefined {
    if (this.#failure !== undefined) return `audit log cannot be written: ${this.#failure}`;
    if (this.#dropped > 0) return `audit log queue full: ${this.#dropped} events dropped`;
    return undefined;
  }

  record(event: AuditEvent): void {
    if (this.#queue.length >= this.#opts.maxQueueLines) {
      this.#dropped++;
      this.#droppedTotal.inc();
      this.#healthy.set(0);
      return;
    }
    if (this.#dropped > 0) {
      const count = this.#dropped;
      this.#dropped = 0;
      this.#enqueue({ action: 'audit.dropped', actor: { principal: 'server' }, detail: { count } });
    }
    this.#enqueue(event);
  }

  #enqueue(event: AuditEvent): void {
    const bytes = this.#format(event);
    if (this.#maxFileBytes > 0 && this.#fileBytes > 0 && this.#fileBytes + bytes.length + 1 > this.#maxFileBytes) {
      // The line would take the file past its size: it goes first in a new one, after the rotation's line.
      this.#queue.push(ROTATE);
      this.#fileBytes = 0;
      this.#push(this.#format(this.#rotation()));
      this.#push(this.#format(event));
    } else this.#push(bytes);
    if (!this.#held) this.#writing ??= this.#drain();
  }

  /** The first line of a file that goes on from a rotated one. */
  #rotation(): AuditEvent {
    const detail = { server: this.#opts.server, pid: process.pid, maxBytes: this.#maxFileBytes };
    return { action: 'audit.rotate', actor: { principal: 'server' }, detail };
  }

  /** The bytes of `event`'s line as the next in the chain (`#push` makes it so). */
  #format(event: AuditEvent): Buffer {
    const actor = event.actor ?? actorStore.getStore() ?? { principal: 'system' };
    const line = boundedLine({
      seq: this.#seq,
      time: new Date().toISOString(),
      tenant: event.tenant ?? actor.tenant ?? null,
      principal: actor.principal,
      remote: actor.remote ?? null,
      session: event.session ?? null,
      action: event.action,
      detail: event.detail ?? {},
      prev: this.#prev,
    });
    return Buffer.from(line, 'utf8');
  }

  /** Queues a line made by `#format`: the chain goes on from it. */
  #push(bytes: Buffer): void {
    this.#seq++;
    // The hash is of the bytes written, which is what verify reads back.
    this.#prev = sha256(bytes);
    this.#queue.push(Buffer.concat([bytes, NEWLINE]));
    this.#fileBytes += bytes.length + 1;
    this.#enqueued++;
  }

  settled(): Promise<void> | undefined {
    // Held lines wait for the server's first line, before it serves anything.
    if (this.#written >= this.#enqueued || this.#held || this.#closed || this.#failure !== undefined) return undefined;
    const upTo = this.#enqueued;
    const last = this.#waiters.at(-1);
    if (last?.upTo === upTo) return last.promise;
    let resolve = (): void => undefined;
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    this.#waiters.push({ upTo, promise, resolve });
    return promise;
  }

  /** Lets go of the `settled` callers whose lines are written (all of them: `all`). */
  #wake(all: boolean): void {
    // In the order of their counts: the first still waiting ends those that may go.
    const waiting = all ? -1 : this.#waiters.findIndex((w) => w.upTo > this.#written);
    for (const w of this.#waiters.splice(0, waiting === -1 ? this.#waiters.length : waiting)) w.resolve();
  }

  /** Starts writing what `holdStdout` kept back (the server printed its address). */
  release(): void {
    if (!this.#held) return;
    this.#held = false;
    if (this.#queue.length > 0) this.#writing ??= this.#drain();
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0 && !this.#closed) {
      try {
        await this.#writeNext();
        if (this.#failure !== undefined) this.#opts.log.warn({}, 'audit log writable again');
        this.#failure = undefined;
        if (this.#dropped === 0) this.#healthy.set(1);
      } catch (err) {
        this.#writeErrors.inc();
        this.#healthy.set(0);
        if (this.#failure === undefined) this.#opts.log.error({ err }, 'audit log write failed; retrying');
        this.#failure = (err as Error).message;
        // Nothing waits on a failing log (the failure is what the operator sees).
        this.#wake(true);
        await new Promise<void>((r) => {
          setTimeout(r, RETRY_MS).unref();
        });
      }
    }
    this.#writing = undefined;
  }

  /** Writes the lines up to the next rotation, or rotates when that is next. */
  async #writeNext(): Promise<void> {
    if (this.#queue[0] === ROTATE) {
      await this.#sink.rotate?.();
      this.#queue.shift();
      return;
    }
    const end = this.#queue.indexOf(ROTATE);
    const batch = (end < 0 ? this.#queue.slice() : this.#queue.slice(0, end)) as Buffer[];
    await this.#sink.write(Buffer.concat(batch));
    this.#queue.splice(0, batch.length);
    this.#written += batch.length;
    this.#wake(false);
    this.#lines.inc(batch.length);
  }

  /** Writes what is queued (one more attempt when writes fail), then closes the file. */
  async close(): Promise<void> {
    this.record({ action: 'audit.stop', actor: { principal: 'server' } });
    this.release();
    const deadline = new Promise<void>((r) => {
      setTimeout(r, 5000).unref();
    });
    await Promise.race([this.#writing, deadline]);
    // A log still failing after the deadline stops retrying: its lines are lost with the process.
    this.#closed = true;
    this.#wake(true);
    await this.#sink.close().catch(() => undefined);
  }
}
