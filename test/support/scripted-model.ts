/**
 * A scripted fake of the OpenAI Responses API, good enough for the Codex CLI (0.171.0).
 *
 * Codex posts `POST {base_url}/responses` with `stream: true` and reads the answer as
 * server-sent events. Each such request consumes the next scripted turn; the turn's answer is
 * streamed back as `response.created`, `response.output_item.added`,
 * `response.output_item.done` and `response.completed`. Every request body is recorded so
 * tests can inspect the `function_call_output` items Codex sends back.
 *
 * Only `node:http` is used; the server listens on 127.0.0.1 with an ephemeral port.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { outputText, sseForAnswer } from './responses-sse.ts';

/** A function call the fake model asks Codex to perform. */
export interface ScriptedFunctionCall {
  type: 'function_call';
  /** Tool name, e.g. `exec_command` or `write_stdin`. */
  name: string;
  /** The tool arguments as a JSON string (as the real API sends them). */
  arguments: string;
  /** Id that Codex echoes back in the matching `function_call_output`. */
  call_id: string;
}

/** A call of a freeform tool (Codex's `apply_patch`): the raw text is the input. */
export interface ScriptedCustomCall {
  type: 'custom_tool_call';
  name: string;
  input: string;
  call_id: string;
}

/** A final assistant message; Codex ends the turn when it receives one without tool calls. */
export interface ScriptedMessage {
  type: 'message';
  text: string;
}

/** What the fake model answers to one request. */
export type ScriptedAnswer = ScriptedFunctionCall | ScriptedCustomCall | ScriptedMessage;

/** One item of the `input` array Codex sends (only the fields the harness looks at are typed). */
export interface ResponsesInputItem {
  type?: string;
  role?: string;
  call_id?: string;
  name?: string;
  arguments?: string;
  /** For `function_call_output`: a string or a list of content items with `text`. */
  output?: unknown;
  content?: unknown;
  [key: string]: unknown;
}

/** A request body as Codex posts it to `/responses` (loosely typed). */
export interface ResponsesRequestBody {
  model?: string;
  stream?: boolean;
  input?: ResponsesInputItem[];
  tools?: unknown[];
  [key: string]: unknown;
}

/** One HTTP request the fake model received. */
export interface RecordedRequest {
  method: string;
  /** Request path including the query string. */
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /** Parsed JSON body, or `undefined` when there was none or it was not JSON. */
  body: ResponsesRequestBody | undefined;
  /** Milliseconds since the model server started. */
  atMs: number;
}

/** Context passed to a computed turn. */
export interface TurnContext {
  /** The request being answered. */
  request: RecordedRequest;
  /** Index of this turn in the script (0-based). */
  index: number;
  /** Output text of an earlier function call, by call id (see {@link ScriptedModel.outputFor}). */
  outputFor(callId: string): string | undefined;
}

/**
 * A scripted turn: a fixed answer, or a function computing the answer from the request
 * (e.g. to reuse a session id printed in an earlier tool output).
 */
export type ScriptedTurn = ScriptedAnswer | ((ctx: TurnContext) => ScriptedAnswer | Promise<ScriptedAnswer>);

/** A running scripted model. */
export interface ScriptedModel {
  /** Base URL for a Codex `model_providers.<id>.base_url` (ends in `/v1`). */
  url: string;
  /** Every request received, in arrival order (includes non-`/responses` requests). */
  requests: RecordedRequest[];
  /** Only the `/responses` requests, in arrival order. */
  readonly responseRequests: RecordedRequest[];
  /** How many scripted turns have been consumed. */
  readonly turnsUsed: number;
  /** Requests that arrived after the script was exhausted (answered with a final message). */
  readonly extraRequests: number;
  /** Errors raised by computed turns (the request was answered with HTTP 500). */
  readonly errors: Error[];
  /**
   * The text of the `function_call_output` Codex sent for `callId`, from the latest request
   * carrying it; content-item arrays are joined. `undefined` if not (yet) received.
   */
  outputFor(callId: string): string | undefined;
  /** Resolves once `callId`'s output has been received, or rejects after `timeoutMs`. */
  waitForOutput(callId: string, timeoutMs?: number): Promise<string>;
  /** Stops the server and drops open connections. */
  close(): Promise<void>;
}

/** Builds an `exec_command` function call. */
export function execCommand(
  callId: string,
  args: {
    cmd: string;
    workdir?: string;
    tty?: boolean;
    yield_time_ms?: number;
    max_output_tokens?: number;
    sandbox_permissions?: string;
    justification?: string;
    [key: string]: unknown;
  },
): ScriptedFunctionCall {
  return { type: 'function_call', name: 'exec_command', arguments: JSON.stringify(args), call_id: callId };
}

/** Builds a `write_stdin` function call (empty `chars` polls the session). */
export function writeStdin(
  callId: string,
  args: { session_id: number; chars?: string; yield_time_ms?: number; max_output_tokens?: number },
): ScriptedFunctionCall {
  return { type: 'function_call', name: 'write_stdin', arguments: JSON.stringify(args), call_id: callId };
}

/** Builds an `apply_patch` call (Codex's freeform tool) with `patch` as its input. */
export function applyPatch(callId: string, patch: string): ScriptedCustomCall {
  return { type: 'custom_tool_call', name: 'apply_patch', input: patch, call_id: callId };
}

/** Builds a final assistant message. */
export function assistantMessage(text: string): ScriptedMessage {
  return { type: 'message', text };
}

/**
 * Extracts the session id from a unified-exec output text
 * (`Process running with session ID <n>`), or `undefined`.
 */
export function sessionIdFromOutput(text: string | undefined): number | undefined {
  const m = text === undefined ? null : /Process running with session ID (\d+)/.exec(text);
  return m?.[1] === undefined ? undefined : Number(m[1]);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/** The state of one running model, shared by its request handler and its accessors. */
interface ModelState {
  turns: readonly ScriptedTurn[];
  started: number;
  requests: RecordedRequest[];
  errors: Error[];
  outputWaiters: Map<string, Array<(text: string) => void>>;
  turnsUsed: number;
  extraRequests: number;
  responseSeq: number;
}

/** The text of the latest `function_call_output` (or custom tool output) for `callId`. */
function outputIn(requests: readonly RecordedRequest[], callId: string): string | undefined {
  for (let i = requests.length - 1; i >= 0; i--) {
    const input = requests[i]?.body?.input;
    if (!Array.isArray(input)) continue;
    for (const item of input) {
      if ((item.type === 'function_call_output' || item.type === 'custom_tool_call_output') && item.call_id === callId)
        return outputText(item.output);
    }
  }
  return undefined;
}

function notifyWaiters(state: ModelState): void {
  for (const [callId, waiters] of state.outputWaiters) {
    const text = outputIn(state.requests, callId);
    if (text === undefined) continue;
    state.outputWaiters.delete(callId);
    for (const w of waiters) w(text);
  }
}

/** Reads and records one request (its body parsed as JSON when it is). */
async function record(state: ModelState, req: IncomingMessage): Promise<RecordedRequest> {
  const raw = await readBody(req);
  let body: ResponsesRequestBody | undefined;
  try {
    body = raw === '' ? undefined : (JSON.parse(raw) as ResponsesRequestBody);
  } catch {
    body = undefined;
  }
  const recorded: RecordedRequest = {
    method: req.method ?? 'GET',
    path: req.url ?? '/',
    headers: req.headers,
    body,
    atMs: Date.now() - state.started,
  };
  state.requests.push(recorded);
  notifyWaiters(state);
  return recorded;
}

/** Answers one request: the next turn for a `POST .../responses`, a 404 for anything else. */
async function handle(state: ModelState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const recorded = await record(state, req);
  const { path } = recorded;
  const pathname = path.split('?')[0] ?? '';
  if (req.method !== 'POST' || !pathname.endsWith('/responses')) {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({ error: { message: `scripted model: no route for ${req.method} ${path}`, type: 'not_found' } }),
    );
    return;
  }

  const index = state.turnsUsed;
  const turn = state.turns[index];
  let answer: ScriptedAnswer;
  if (turn === undefined) {
    state.extraRequests++;
    answer = assistantMessage('script exhausted');
  } else {
    state.turnsUsed++;
    try {
      const outputFor = (callId: string): string | undefined => outputIn(state.requests, callId);
      answer = typeof turn === 'function' ? await turn({ request: recorded, index, outputFor }) : turn;
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      state.errors.push(e);
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ error: { message: `scripted turn ${index} failed: ${e.message}`, type: 'server_error' } }),
      );
      return;
    }
  }
  state.responseSeq++;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  res.end(sseForAnswer(answer, `resp_${state.responseSeq}`, `item_${state.responseSeq}`));
}

/** Resolves with `callId`'s output once received, or rejects after `timeoutMs`. */
function waitForOutput(state: ModelState, callId: string, timeoutMs: number): Promise<string> {
  const now = outputIn(state.requests, callId);
  if (now !== undefined) return Promise.resolve(now);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no function_call_output for ${callId} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const list = state.outputWaiters.get(callId) ?? [];
    list.push((text) => {
      clearTimeout(timer);
      resolve(text);
    });
    state.outputWaiters.set(callId, list);
  });
}

/**
 * Starts a scripted Responses API server on 127.0.0.1 (ephemeral port).
 *
 * Each `POST .../responses` consumes the next turn. Once the script is exhausted, further
 * requests get a final assistant message (`"script exhausted"`) so Codex stops, and are
 * counted in {@link ScriptedModel.extraRequests}. Other paths get a 404 JSON error.
 */
export async function startScriptedModel(turns: readonly ScriptedTurn[]): Promise<ScriptedModel> {
  const state: ModelState = {
    turns,
    started: Date.now(),
    requests: [],
    errors: [],
    outputWaiters: new Map(),
    turnsUsed: 0,
    extraRequests: 0,
    responseSeq: 0,
  };
  const { requests, errors } = state;
  const server = createServer((req, res) => {
    handle(state, req, res).catch((err: unknown) => {
      errors.push(err instanceof Error ? err : new Error(String(err)));
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    get responseRequests() {
      return requests.filter((r) => r.method === 'POST' && (r.path.split('?')[0] ?? '').endsWith('/responses'));
    },
    get turnsUsed() {
      return state.turnsUsed;
    },
    get extraRequests() {
      return state.extraRequests;
    },
    errors,
    outputFor: (callId: string): string | undefined => outputIn(requests, callId),
    waitForOutput: (callId: string, timeoutMs = 30_000): Promise<string> => waitForOutput(state, callId, timeoutMs),
    close(): Promise<void> {
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
