/**
 * Approvals for HTTP-only agents. A WebSocket client answers `approval/request` itself; a
 * session used over HTTP has no such client, so the session asks this queue of its
 * unified-exec facade instead (`Session.requestApproval`; an attached WebSocket client is
 * always asked first). A request is queued only for a process that an HTTP tool call is
 * running (its `ToolRun`), which then answers `approval_required` with the approval id; the
 * follow-up `POST /v1/sessions/:id/approvals/:approvalId {decision}` resolves it and returns
 * the original call's next outcome. Unanswered approvals expire as denied (fail closed).
 */
import { randomUUID } from 'node:crypto';
import { execError, httpErrorBody, toExecError } from '../errors.ts';
import { asProcessId, type ProcessId } from '../ids.ts';
import type { ApprovalDecision, ApprovalRequest } from '../policy/approvals.ts';
import type { ErrorStatus } from '../errors.ts';
import type { ApprovalRequired, ErrorBody, ExecToolResult, FunctionCallOutput } from '../protocol/index.ts';

/** A tool-facade command waiting for an HTTP client's decision. */
export interface PendingApproval {
  readonly id: string;
  readonly request: ApprovalRequest;
  readonly createdAt: string;
  readonly expiresAt: string;
  readonly run: ToolRun;
}

/** What a tool call answers with when it is done: a unified-exec result, or a model's function output. */
export type ToolBody = ExecToolResult | FunctionCallOutput;

/** The HTTP answer of a tool call: a status and its JSON body. */
export type ToolReply<B extends ToolBody = ToolBody> =
  | { readonly statusCode: 200; readonly body: B }
  | { readonly statusCode: 202; readonly body: ApprovalRequired }
  | { readonly statusCode: ErrorStatus; readonly body: ErrorBody };

export type RunOutcome<B extends ToolBody = ToolBody> =
  | { readonly kind: 'reply'; readonly reply: ToolReply<B> }
  | { readonly kind: 'approval'; readonly approval: PendingApproval };

/** A facade call's result as a reply: 200 with the result, or its error's status and `{code, message}`. */
export async function asReply(work: () => Promise<ExecToolResult>): Promise<ToolReply<ExecToolResult>> {
  try {
    return { statusCode: 200, body: await work() };
  } catch (err) {
    const e = toExecError(err);
    return { statusCode: e.statusCode, body: httpErrorBody(e) };
  }
}

/**
 * Facade work (`exec_command`, `write_stdin`) as one tool call, for the HTTP routes and MCP
 * alike: its first outcome, the reply or an approval a person must give first (the decision
 * then resumes the run through the approval queue).
 */
export function runFacadeCall(
  work: (run: ToolRun<ExecToolResult>) => Promise<ExecToolResult>,
): Promise<RunOutcome<ExecToolResult>> {
  return new ToolRun<ExecToolResult>(undefined).start((r) => asReply(() => work(r))).nextOutcome();
}

/**
 * One HTTP tool call in flight. Its work runs in the background; `nextOutcome()` resolves
 * with its reply, or earlier with an approval it is waiting for. While an approval is
 * pending the call's yield deadline does not run (`pausedMs`).
 */
export class ToolRun<B extends ToolBody = ToolBody> {
  readonly callId: string | undefined;
  #reply: ToolReply<B> | undefined;
  #approvals: PendingApproval[] = [];
  #waiters: Array<() => void> = [];
  #pendingCount = 0;
  #pausedSince = 0;
  #pausedTotal = 0;

  constructor(callId: string | undefined) {
    this.callId = callId;
  }

  /** Starts the work; `work` must not reject (errors are replies too). */
  start(work: (run: ToolRun<B>) => Promise<ToolReply<B>>): this {
    void work(this).then((reply) => {
      this.#reply = reply;
      this.#wake();
    });
    return this;
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  approvalQueued(approval: PendingApproval): void {
    if (this.#pendingCount++ === 0) this.#pausedSince = Date.now();
    this.#approvals.push(approval);
    this.#wake();
  }

  approvalSettled(): void {
    if (--this.#pendingCount === 0) this.#pausedTotal += Date.now() - this.#pausedSince;
    this.#wake();
  }

  get approvalPending(): boolean {
    return this.#pendingCount > 0;
  }

  /** Milliseconds spent waiting for a person so far. */
  get pausedMs(): number {
    return this.#pausedTotal + (this.#pendingCount > 0 ? Date.now() - this.#pausedSince : 0);
  }

  /** Resolves on the next change (an approval queued or settled, or the reply). */
  changed(): Promise<void> {
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  async nextOutcome(): Promise<RunOutcome<B>> {
    for (;;) {
      const approval = this.#approvals.shift();
      if (approval) return { kind: 'approval', approval };
      if (this.#reply) return { kind: 'reply', reply: this.#reply };
      await this.changed();
    }
  }
}

interface Entry {
  readonly pending: PendingApproval;
  readonly resolve: (decision: ApprovalDecision) => void;
  readonly timer: NodeJS.Timeout;
}

/** Answers `approval/request` for a session without an attached client (a `SessionClient`, structurally). */
export class HttpApprovalQueue {
  readonly clientName = 'http';
  readonly #owners = new Map<ProcessId, ToolRun>();
  readonly #pending = new Map<string, Entry>();

  /** Routes approvals of `processId` to `run` until the returned function is called. */
  own(processId: ProcessId, run: ToolRun): () => void {
    this.#owners.set(processId, run);
    return () => {
      if (this.#owners.get(processId) === run) this.#owners.delete(processId);
    };
  }

  request(method: string, params: unknown, timeoutMs: number): Promise<unknown> {
    if (method !== 'approval/request')
      return Promise.reject(execError('EXEC_ERR_UNSUPPORTED', `unsupported request ${method}`));
    const request = params as ApprovalRequest;
    const run = this.#owners.get(asProcessId(request.processId));
    if (!run) return Promise.reject(execError('EXEC_ERR_REJECTED', 'no client is attached to answer the approval'));
    return new Promise((resolve, reject) => {
      const id = `appr_${randomUUID().replace(/-/g, '').slice(0, 20)}`;
      const now = Date.now();
      const pending: PendingApproval = {
        id,
        request,
        createdAt: new Date(now).toISOString(),
        expiresAt: new Date(now + timeoutMs).toISOString(),
        run,
      };
      const timer = setTimeout(() => {
        if (!this.#pending.delete(id)) return;
        run.approvalSettled();
        reject(execError('EXEC_ERR_REJECTED', 'approval timed out'));
      }, timeoutMs);
      timer.unref();
      this.#pending.set(id, {
        pending,
        timer,
        resolve: (decision) => {
          clearTimeout(timer);
          resolve({ decision });
        },
      });
      run.approvalQueued(pending);
    });
  }

  /** Nothing to close: HTTP callers are not connections. */
  evict(): void {}

  list(): PendingApproval[] {
    return [...this.#pending.values()].map((e) => e.pending);
  }

  /** Answers a pending approval; the call's next outcome follows from `pending.run`. */
  decide(approvalId: string, decision: ApprovalDecision): PendingApproval {
    const entry = this.#pending.get(approvalId);
    if (!entry)
      throw execError(
        'EXEC_ERR_APPROVAL_NOT_FOUND',
        `approval ${approvalId} not found (unknown, already decided or expired)`,
      );
    this.#pending.delete(approvalId);
    entry.resolve(decision);
    entry.pending.run.approvalSettled();
    return entry.pending;
  }

  /** Denies everything pending (session going away). */
  close(): void {
    for (const id of [...this.#pending.keys()]) this.decide(id, 'denied');
  }
}

/** The wire form of an approval the caller must decide. */
export function approvalRequiredBody(approval: PendingApproval, callId: string | undefined): ApprovalRequired {
  const r = approval.request;
  return {
    status: 'approval_required',
    ...(callId !== undefined ? { call_id: callId } : {}),
    approval_id: approval.id,
    approval: {
      id: approval.id,
      purpose: r.purpose,
      reason: r.reason,
      argv: [...r.argv],
      cwd: r.cwd,
      createdAt: approval.createdAt,
      expiresAt: approval.expiresAt,
    },
  };
}

/** The HTTP answer of a tool run: its reply, or a 202 naming the approval it waits for. */
export function outcomeReply<B extends ToolBody>(outcome: RunOutcome<B>, callId: string | undefined): ToolReply<B> {
  if (outcome.kind === 'reply') return outcome.reply;
  return { statusCode: 202, body: approvalRequiredBody(outcome.approval, callId) };
}
