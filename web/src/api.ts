/** The REST API as the console uses it: bearer token on every call, errors as `ApiError`. */
import type { Static } from 'typebox';
import { ExecServerHttpError as ApiError, jsonOrUndefined } from '../../src/client/errors.ts';
import type { ErrorBody } from '../../src/protocol/common.ts';
import type { ResourceUsage, SessionInfo, SessionSpec, SnapshotInfo } from '../../src/protocol/session.ts';
import type { SessionToken } from '../../src/protocol/tokens.ts';
import type { ApprovalSchema, DecisionBodySchema } from '../../src/protocol/tools.ts';

/** The wire types the console uses, all from the protocol module (src/protocol/). */
export type { ResourceUsage, SessionInfo, SessionToken, SnapshotInfo };

/** True for a token that opens one session only (the console then shows that session alone). */
export function isSessionToken(token: string): boolean {
  return token.startsWith('est1.');
}
/** A pending approval as `GET /v1/sessions/:id/approvals` lists it. */
export type Approval = Static<typeof ApprovalSchema>;
type Decision = Static<typeof DecisionBodySchema>['decision'];

/** An error answer (status 0: the server could not be reached): the SDK's error class, one for both. */
export { ExecServerHttpError as ApiError } from '../../src/client/errors.ts';

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
    const parsed = jsonOrUndefined(await res.text());
    if (res.status === 401) this.#onUnauthorized?.();
    if (!res.ok && res.status !== 202) {
      const e = (parsed ?? {}) as Partial<ErrorBody>;
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
  createSession(spec: SessionSpec = {}): Promise<SessionInfo> {
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
  decide(id: string, approvalId: string, decision: Decision): Promise<Record<string, unknown>> {
    return this.call('POST', `/v1/sessions/${encodeURIComponent(id)}/approvals/${encodeURIComponent(approvalId)}`, {
      decision,
    });
  }
}
