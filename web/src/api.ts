/** The REST API as the console uses it: bearer token on every call, errors as `ApiError`. */

export class ApiError extends Error {
  override readonly name = 'ApiError';
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export interface Usage {
  readonly cpuPercent: number | null;
  readonly cpuSeconds: number;
  readonly memoryBytes: number;
  readonly memoryLimitBytes: number | null;
  readonly pids: number;
  readonly pidsLimit: number | null;
  readonly sampledAt: string;
}

export interface SessionInfo {
  readonly sessionId: string;
  readonly tenant: string;
  readonly backend: string;
  readonly runtime?: string;
  readonly sandboxType: string;
  readonly sandboxUnavailableReason?: string;
  readonly sandbox: { readonly type: string; readonly networkAccess?: boolean };
  readonly approvalPolicy: string | { readonly granular: { readonly sandboxApproval: boolean } };
  readonly denialHandling: string;
  readonly image?: string;
  readonly containerId?: string;
  readonly execPath?: 'agent' | 'exec';
  readonly execPathReason?: string;
  readonly workdir: string;
  readonly status: 'alive' | 'dead';
  readonly attached: boolean;
  readonly processes: number;
  readonly runningProcesses: number;
  readonly labels: Record<string, string>;
  readonly createdAt: string;
  readonly expiresAt: string;
  readonly usage?: Usage | null;
}

export interface Approval {
  readonly id: string;
  readonly purpose: 'initial' | 'sandbox-retry';
  readonly reason: string;
  readonly argv: readonly string[];
  readonly cwd: string;
  readonly createdAt: string;
  readonly expiresAt: string;
}

export interface SnapshotInfo {
  readonly snapshotId: string;
  readonly name?: string;
  readonly createdAt: string;
}

/** A token scoped to one session (`POST /v1/sessions/{id}/tokens`). */
export interface SessionToken {
  readonly token: string;
  readonly tokenId: string;
  readonly access: 'full' | 'read';
  readonly expiresAt: string;
}

/** True for a token that opens one session only (the console then shows that session alone). */
export function isSessionToken(token: string): boolean {
  return token.startsWith('est1.');
}

export class Api {
  readonly token: string;
  readonly #onUnauthorized: (() => void) | undefined;
  /** `onUnauthorized`: the server refused the token (restarted with other tokens): sign out. */
  constructor(token: string, onUnauthorized?: () => void) {
    this.token = token;
    this.#onUnauthorized = onUnauthorized;
  }

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { 'x-client-name': 'exec-server-console' };
    if (this.token !== '') headers['authorization'] = `Bearer ${this.token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(path, {
        method,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        cache: 'no-store',
      });
    } catch (err) {
      throw new ApiError(0, 'EXEC_ERR_UNREACHABLE', `the server cannot be reached (${(err as Error).message})`);
    }
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    if (res.status === 401) this.#onUnauthorized?.();
    if (!res.ok && res.status !== 202) {
      const e = (parsed ?? {}) as { code?: string; message?: string };
      throw new ApiError(
        res.status,
        e.code ?? `HTTP_${res.status}`,
        e.message ?? `${method} ${path} answered ${res.status}`,
      );
    }
    return parsed as T;
  }

  sessions(): Promise<{ sessions: SessionInfo[] }> {
    return this.call('GET', '/v1/sessions?usage=true');
  }
  session(id: string): Promise<SessionInfo> {
    return this.call('GET', `/v1/sessions/${encodeURIComponent(id)}`);
  }
  createSession(spec: Record<string, unknown> = {}): Promise<SessionInfo> {
    return this.call('POST', '/v1/sessions', spec);
  }
  deleteSession(id: string): Promise<void> {
    return this.call('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }
  snapshot(id: string, name?: string): Promise<SnapshotInfo> {
    return this.call('POST', `/v1/sessions/${encodeURIComponent(id)}/snapshots`, name ? { name } : {});
  }
  createSessionToken(id: string, body: { access: 'full' | 'read'; ttlSeconds: number }): Promise<SessionToken> {
    return this.call('POST', `/v1/sessions/${encodeURIComponent(id)}/tokens`, body);
  }
  revokeSessionToken(id: string, tokenId: string): Promise<void> {
    return this.call('DELETE', `/v1/sessions/${encodeURIComponent(id)}/tokens/${encodeURIComponent(tokenId)}`);
  }
  approvals(id: string): Promise<{ approvals: Approval[] }> {
    return this.call('GET', `/v1/sessions/${encodeURIComponent(id)}/approvals`);
  }
  decide(id: string, approvalId: string, decision: 'approved' | 'denied'): Promise<Record<string, unknown>> {
    return this.call('POST', `/v1/sessions/${encodeURIComponent(id)}/approvals/${encodeURIComponent(approvalId)}`, {
      decision,
    });
  }
}
