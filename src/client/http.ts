/** The REST half of the SDK: sessions, snapshots and the tool facade over plain HTTP. */
import type {
  CreateSessionToken,
  ExecCommandArgs,
  ExecToolResult,
  ForkAnswer,
  ForkBody,
  ImagePull,
  SessionInfo,
  SessionSpec,
  SessionToken,
  SnapshotInfo,
  WriteStdinArgs,
} from '../protocol/index.ts';
import { ExecServerHttpError, jsonOrUndefined } from './errors.ts';

export type { SessionInfo, SessionSpec, SnapshotInfo } from '../protocol/index.ts';

/** `ws://h:p/...` -> `http://h:p` (and wss -> https); http(s) URLs are kept. */
export function httpBaseOf(url: string): string {
  const u = new URL(url);
  const protocol = u.protocol === 'wss:' || u.protocol === 'https:' ? 'https:' : 'http:';
  return `${protocol}//${u.host}`;
}

/** `http://h:p/...` -> `ws://h:p/` (and https -> wss); ws(s) URLs are kept. */
export function wsUrlOf(url: string): string {
  const u = new URL(url);
  if (u.protocol === 'ws:' || u.protocol === 'wss:') return url;
  return `${u.protocol === 'https:' ? 'wss:' : 'ws:'}//${u.host}/`;
}

/** The REST half of the SDK (`client.http`): sessions, snapshots, tokens and the tool facade. */
export class HttpApi {
  readonly baseUrl: string;
  readonly #token: string | undefined;

  constructor(url: string, token?: string) {
    this.baseUrl = httpBaseOf(url);
    this.#token = token;
  }

  /** One request; an error answer throws `ExecServerHttpError`. Returns undefined for 204. */
  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    if (this.#token) headers['authorization'] = `Bearer ${this.#token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers,
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    const json = jsonOrUndefined(text);
    if (!res.ok) throw ExecServerHttpError.of(res.status, json, text || res.statusText);
    return json as T;
  }

  createSession(spec: SessionSpec = {}): Promise<SessionInfo> {
    return this.request('POST', '/v1/sessions', spec);
  }

  /**
   * `count` sessions of one spec at once (best-of-N, rollouts; at most 256): all of them, or an
   * `ExecServerHttpError` with none left behind.
   */
  async createSessions(count: number, spec: SessionSpec = {}): Promise<SessionInfo[]> {
    const path = `/v1/sessions?count=${encodeURIComponent(String(count))}`;
    return (await this.request<{ sessions: SessionInfo[] }>('POST', path, spec)).sessions;
  }

  /**
   * The image pulls in flight that this tenant's session creations wait for: a `createSession`
   * blocks until its pull ends, so another request can follow the pull here.
   */
  async imagePulls(): Promise<ImagePull[]> {
    return (await this.request<{ pulls: ImagePull[] }>('GET', '/v1/images/pulls')).pulls;
  }

  async listSessions(): Promise<SessionInfo[]> {
    return (await this.request<{ sessions: SessionInfo[] }>('GET', '/v1/sessions')).sessions;
  }

  getSession(id: string): Promise<SessionInfo> {
    return this.request('GET', `/v1/sessions/${encodeURIComponent(id)}`);
  }

  async deleteSession(id: string): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }

  /** A token that opens session `id` only (`full` by default; `read`: attach, replay output, read files). */
  createSessionToken(id: string, opts: CreateSessionToken = {}): Promise<SessionToken> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(id)}/tokens`, opts);
  }

  /** Revokes a session token: it opens nothing from now on (live connections using it are closed). */
  async revokeSessionToken(id: string, tokenId: string): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}/tokens/${encodeURIComponent(tokenId)}`);
  }

  /** A snapshot of session `id`; with `memory` (gVisor) a live template, whose sessions start with its processes running. */
  snapshot(id: string, name?: string, opts: { memory?: boolean } = {}): Promise<SnapshotInfo> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(id)}/snapshots`, {
      ...(name === undefined ? {} : { name }),
      ...(opts.memory === true ? { memory: true } : {}),
    });
  }

  /**
   * Forks session `id` into `count` new sessions (default 1, at most 16); with `memory` (gVisor)
   * every process of the source runs on in each fork (docs/snapshots.md).
   */
  fork(id: string, opts: ForkBody = {}): Promise<ForkAnswer> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(id)}/fork`, opts);
  }

  /** The snapshots taken of session `id` (a session token of it may list them, a `full` one delete them). */
  async listSessionSnapshots(id: string): Promise<SnapshotInfo[]> {
    const path = `/v1/sessions/${encodeURIComponent(id)}/snapshots`;
    return (await this.request<{ snapshots: SnapshotInfo[] }>('GET', path)).snapshots;
  }

  /** Deletes a snapshot taken of session `id`, by its `snapshotId` as listed. */
  async deleteSessionSnapshot(id: string, snapshotId: string): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}/snapshots/${encodeURIComponent(snapshotId)}`);
  }

  async listSnapshots(): Promise<SnapshotInfo[]> {
    return (await this.request<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots')).snapshots;
  }

  async deleteSnapshot(id: string): Promise<void> {
    await this.request('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
  }

  /** `exec_command`; a 202 (a person must approve first) answers the approval instead (see the OpenAPI document). */
  execCommand(sessionId: string, args: ExecCommandArgs): Promise<ExecToolResult> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(sessionId)}/exec_command`, args);
  }

  writeStdin(sessionId: string, args: WriteStdinArgs): Promise<ExecToolResult> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(sessionId)}/write_stdin`, args);
  }
}
