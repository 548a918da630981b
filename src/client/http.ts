/** The REST half of the SDK: sessions, snapshots and the tool facade over plain HTTP. */
import type { SessionId } from '../ids.ts';
import { ExecServerHttpError } from './errors.ts';

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

export interface SessionInfo {
  readonly sessionId: SessionId;
  readonly tenant: string;
  readonly backend: string;
  readonly sandboxType: string;
  readonly workdir: string;
  readonly status: 'alive' | 'dead';
  readonly attached: boolean;
  readonly processes: number;
  readonly runningProcesses: number;
  readonly image?: string;
  readonly containerId?: string;
  readonly labels: Record<string, string>;
  readonly createdAt: string;
  readonly expiresAt: string;
  readonly [key: string]: unknown;
}

export interface SnapshotInfo {
  readonly snapshotId: string;
  readonly name?: string;
  readonly sessionId?: string;
  readonly createdAt: string;
}

/** The session spec of `POST /v1/sessions` and `initialize.session`. */
export interface SessionSpec {
  image?: string;
  snapshot?: string;
  workdir?: string;
  env?: Record<string, string>;
  labels?: Record<string, string>;
  sandbox?: { type: 'workspace-write'; writableRoots?: string[]; networkAccess?: boolean; excludeSlashTmp?: boolean } | { type: 'read-only'; networkAccess?: boolean } | { type: 'danger-full-access' };
  denyRead?: string[];
  approvalPolicy?: 'untrusted' | 'on-failure' | 'on-request' | 'never' | { granular: { sandboxApproval: boolean } };
  strictAutoReview?: boolean;
  resources?: { memoryMb?: number; cpus?: number; pids?: number };
  idleTimeoutSeconds?: number;
  maxLifetimeSeconds?: number;
}

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
    const res = await fetch(`${this.baseUrl}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    const text = await res.text();
    let json: unknown;
    try {
      json = text === '' ? undefined : JSON.parse(text);
    } catch {
      json = undefined;
    }
    if (!res.ok) {
      const err = (json ?? {}) as { code?: string; message?: string };
      throw new ExecServerHttpError(res.status, err.code ?? `HTTP_${res.status}`, err.message ?? (text || res.statusText));
    }
    return json as T;
  }

  createSession(spec: SessionSpec = {}): Promise<SessionInfo> {
    return this.request('POST', '/v1/sessions', spec);
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

  snapshot(id: string, name?: string): Promise<SnapshotInfo> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(id)}/snapshots`, name === undefined ? {} : { name });
  }

  async listSnapshots(): Promise<SnapshotInfo[]> {
    return (await this.request<{ snapshots: SnapshotInfo[] }>('GET', '/v1/snapshots')).snapshots;
  }

  async deleteSnapshot(id: string): Promise<void> {
    await this.request('DELETE', `/v1/snapshots/${encodeURIComponent(id)}`);
  }

  execCommand(sessionId: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(sessionId)}/exec_command`, args);
  }

  writeStdin(sessionId: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
    return this.request('POST', `/v1/sessions/${encodeURIComponent(sessionId)}/write_stdin`, args);
  }
}
