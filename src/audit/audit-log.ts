/**
 * The audit log (`--audit-log PATH`, `-` for standard output): one JSON object a line saying who
 * (tenant, principal, remote address) did what (action, detail) to which session, when. Lines
 * form a hash chain: each carries `prev`, the SHA-256 (hex) of the line before it, from a first
 * `audit.start` line naming the server and time, so `exec-server audit verify` (verify.ts) finds
 * the first line edited, removed or reordered. A restarted server appends: its `audit.start`
 * chains to the last line already there.
 *
 * Writes are queued (at most `--audit-queue-lines`) and written in order by one writer. When the
 * queue is full, new events are dropped and counted; the next line that fits is `audit.dropped`
 * with that count, so the gap is itself in the chain. A failed write is retried every second,
 * its lines kept. Either way the operator sees it: `/readyz` fails (notReadyReason), and
 * `exec_server_audit_healthy` is 0 with `exec_server_audit_dropped_total` /
 * `exec_server_audit_write_errors_total` counting. Never silent, never blocking a request.
 */
import { createHash } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';
import { Counter, Gauge } from 'prom-client';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { actorStore, type AuditEvent, type Auditor } from './auditor.ts';

const sha256 = (line: string): string => createHash('sha256').update(line).digest('hex');

/** Bytes read from the end of an existing log to find its last line. */
const TAIL_BYTES = 256 * 1024;

const RETRY_MS = 1000;

export interface AuditLogOptions {
  /**
   * Standard output only: queue lines without writing them until `release()`, so that the
   * server's `ws://HOST:PORT` line stays the first line of its standard output.
   */
  readonly holdStdout?: boolean | undefined;
  readonly server: string;
  readonly version: string;
  readonly maxQueueLines: number;
  readonly metrics: Metrics;
  readonly log: Logger;
}

interface Sink {
  write(text: string): Promise<void>;
  close(): Promise<void>;
}

async function fileSink(path: string): Promise<{ sink: Sink; last: string | undefined }> {
  const handle: FileHandle = await open(path, 'a+', 0o600);
  const { size } = await handle.stat();
  let last: string | undefined;
  if (size > 0) {
    const length = Math.min(size, TAIL_BYTES);
    const buf = Buffer.alloc(length);
    await handle.read(buf, 0, length, size - length);
    const lines = buf
      .toString('utf8')
      .split('\n')
      .filter((l) => l !== '');
    last = lines[lines.length - 1];
  }
  return {
    last,
    sink: {
      write: async (text) => {
        await handle.appendFile(text);
      },
      close: () => handle.close(),
    },
  };
}

function stdoutSink(): Sink {
  return {
    write: (text) =>
      new Promise((resolve, reject) => process.stdout.write(text, (err) => (err ? reject(err) : resolve()))),
    close: async () => undefined,
  };
}

export class AuditLog implements Auditor {
  readonly enabled = true;
  readonly #sink: Sink;
  readonly #opts: AuditLogOptions;
  readonly #queue: string[] = [];
  #prev: string | null;
  #seq: number;
  #dropped = 0;
  #writing: Promise<void> | undefined;
  #failure: string | undefined;
  #held: boolean;
  #closed = false;
  readonly #healthy: Gauge;
  readonly #droppedTotal: Counter;
  readonly #writeErrors: Counter;
  readonly #lines: Counter;

  private constructor(sink: Sink, last: string | undefined, opts: AuditLogOptions) {
    this.#sink = sink;
    this.#opts = opts;
    this.#held = false;
    this.#prev = last === undefined ? null : sha256(last);
    this.#seq = 0;
    if (last !== undefined) {
      try {
        const seq = (JSON.parse(last) as { seq?: unknown }).seq;
        if (typeof seq === 'number') this.#seq = seq + 1;
      } catch {
        // A torn last line (a crash mid-write): the chain goes on from its hash; verify names it.
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

  /** Opens (appends to) `path`, or standard output for `-`, and writes the chain's `audit.start` line. */
  static async open(path: string, opts: AuditLogOptions): Promise<AuditLog> {
    const { sink, last } = path === '-' ? { sink: stdoutSink(), last: undefined } : await fileSink(path);
    const log = new AuditLog(sink, last, opts);
    log.#held = path === '-' && opts.holdStdout === true;
    log.record({
      action: 'audit.start',
      actor: { principal: 'server' },
      detail: { server: opts.server, version: opts.version, pid: process.pid, continues: last !== undefined },
    });
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
    const actor = event.actor ?? actorStore.getStore() ?? { principal: 'system' };
    const line = JSON.stringify({
      seq: this.#seq++,
      time: new Date().toISOString(),
      tenant: event.tenant ?? actor.tenant ?? null,
      principal: actor.principal,
      remote: actor.remote ?? null,
      session: event.session ?? null,
      action: event.action,
      detail: event.detail ?? {},
      prev: this.#prev,
    });
    this.#prev = sha256(line);
    this.#queue.push(`${line}\n`);
    if (!this.#held) this.#writing ??= this.#drain();
  }

  /** Starts writing what `holdStdout` kept back (the server printed its address). */
  release(): void {
    if (!this.#held) return;
    this.#held = false;
    if (this.#queue.length > 0) this.#writing ??= this.#drain();
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0 && !this.#closed) {
      const batch = this.#queue.slice();
      try {
        await this.#sink.write(batch.join(''));
        this.#queue.splice(0, batch.length);
        this.#lines.inc(batch.length);
        if (this.#failure !== undefined) this.#opts.log.warn({}, 'audit log writable again');
        this.#failure = undefined;
        if (this.#dropped === 0) this.#healthy.set(1);
      } catch (err) {
        this.#writeErrors.inc();
        this.#healthy.set(0);
        if (this.#failure === undefined) this.#opts.log.error({ err }, 'audit log write failed; retrying');
        this.#failure = (err as Error).message;
        await new Promise<void>((r) => {
          setTimeout(r, RETRY_MS).unref();
        });
      }
    }
    this.#writing = undefined;
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
    await this.#sink.close().catch(() => undefined);
  }
}
