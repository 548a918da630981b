/** Real-HTTP helpers for the REST and tool facade tests. */
import type { TestContext } from 'node:test';
import { startServer, type ServerOptions, type TestServer } from '../support/harness.ts';

export interface Answer<T = any> {
  readonly status: number;
  readonly body: T;
  readonly headers: Headers;
}

export interface Api {
  (method: string, path: string, body?: unknown, token?: string): Promise<Answer>;
  readonly server: TestServer;
}

/** A server closed in t.after, and a fetch wrapper against it. */
export async function serverWithApi(t: TestContext, opts: ServerOptions = {}, defaultToken?: string): Promise<Api> {
  const server = await startServer(opts);
  t.after(() => server.close());
  const fn = async (method: string, path: string, body?: unknown, token = defaultToken): Promise<Answer> => {
    const headers: Record<string, string> = {};
    if (token !== undefined) headers['authorization'] = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${server.httpUrl}${path}`, { method, headers, ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}) });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      // keep text
    }
    return { status: res.status, body: parsed, headers: res.headers };
  };
  return Object.assign(fn, { server });
}

export async function newSession(api: Api, spec: Record<string, unknown> = {}, token?: string): Promise<string> {
  const r = await api('POST', '/v1/sessions', spec, token);
  if (r.status !== 201) throw new Error(`session create failed: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.sessionId as string;
}

/** The Codex text block, parsed back into its parts. */
export const TEXT_RE = /^Chunk ID: ([0-9a-f]{6})\nWall time: (\d+\.\d{4}) seconds\n(?:Process exited with code (-?\d+)|Process running with session ID (\d+))\nOriginal token count: (\d+)\nOutput:\n([\s\S]*)$/;
