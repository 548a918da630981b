/** Real-HTTP helpers for the REST and tool facade tests. */
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type {
  ApprovalRequired,
  ErrorBody,
  ExecToolResult,
  PreviewAnswer,
  SessionInfo,
} from '../../src/protocol/index.ts';
import { startServer, type ServerOptions, type TestServer } from '../support/harness.ts';

/**
 * An answer as a test reads it: `T` is what the route answers on success (the caller names it;
 * the test asserts the status). An error answer has the registry's body instead, so its fields
 * are there too, optional.
 */
export interface Answer<T = unknown> {
  readonly status: number;
  readonly body: T & Partial<ErrorBody>;
  readonly headers: Headers;
}

/** What exec_command and write_stdin answer: a result, or (202) first an approval a person must give. */
export type ExecAnswer = ExecToolResult & Partial<ApprovalRequired>;

export interface Api {
  <T = unknown>(method: string, path: string, body?: unknown, token?: string): Promise<Answer<T>>;
  readonly server: TestServer;
}

/** A server closed in t.after, and a fetch wrapper against it. */
export async function serverWithApi(t: TestContext, opts: ServerOptions = {}, defaultToken?: string): Promise<Api> {
  const server = await startServer(opts);
  t.after(() => server.close());
  const fn = <T>(method: string, path: string, body?: unknown, token = defaultToken): Promise<Answer<T>> =>
    requestJson<T>(`${server.httpUrl}${path}`, method, body, token);
  return Object.assign(fn, { server });
}

/**
 * One request with an optional bearer token and JSON body (a string is sent as it is); the
 * answer's body parsed (its text when it is not JSON, undefined when empty).
 */
export async function requestJson<T = unknown>(
  url: string,
  method: string,
  body?: unknown,
  token?: string,
): Promise<Answer<T>> {
  const headers: Record<string, string> = {};
  if (token !== undefined) headers['authorization'] = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url, {
    method,
    headers,
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    // keep text
  }
  return { status: res.status, body: parsed as Answer<T>['body'], headers: res.headers };
}

export async function newSession(api: Api, spec: Record<string, unknown> = {}, token?: string): Promise<string> {
  const r = await api<SessionInfo>('POST', '/v1/sessions', spec, token);
  if (r.status !== 201) throw new Error(`session create failed: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.sessionId;
}

/**
 * A session made on `server` (POST /v1/sessions with `body`, as `token` when given): the 201 is
 * asserted, with the answer in the message; the answer's body.
 */
export async function createSession(
  server: { readonly http: string },
  body: object,
  token?: string,
): Promise<{ sessionId: string }> {
  const made = await requestJson<{ sessionId: string }>(`${server.http}/v1/sessions`, 'POST', body, token);
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return made.body;
}

/** The Codex text block, parsed back into its parts. */
export const TEXT_RE =
  /^Chunk ID: ([0-9a-f]{6})\nWall time: (\d+\.\d{4}) seconds\n(?:Process exited with code (-?\d+)|Process running with session ID (\d+))\nOriginal token count: (\d+)\nOutput:\n([\s\S]*)$/;

/**
 * An MCP `initialize` POSTed to `base`/mcp as client `client`: the bearer `token` if any, more
 * `headers` (an origin), and `pad` in the client info to make the body as large as wanted.
 */
export function mcpInitialize(
  base: string,
  o: { client: string; token?: string | undefined; headers?: Record<string, string>; pad?: string },
): Promise<Response> {
  return fetch(`${base}/mcp`, {
    method: 'POST',
    headers: {
      ...o.headers,
      ...(o.token !== undefined ? { authorization: `Bearer ${o.token}` } : {}),
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: {
        protocolVersion: '2025-03-26',
        capabilities: {},
        clientInfo: { name: o.client, version: '1', ...(o.pad === undefined ? {} : { pad: o.pad }) },
      },
    }),
  });
}

/** Exposes `port` of session `sessionId` as a preview port (asserts 201): the answer. */
export async function exposePort(
  httpUrl: string,
  sessionId: string,
  port: number,
  token: string,
): Promise<PreviewAnswer> {
  const exposed = await requestJson<PreviewAnswer>(
    `${httpUrl}/v1/sessions/${sessionId}/ports`,
    'POST',
    { port },
    token,
  );
  assert.equal(exposed.status, 201);
  return exposed.body;
}
