/**
 * The client side of bench/compare-reference.ts: one JSON-RPC client over a WebSocket, the same
 * for our server and the reference, and the requests it sends each (initialize, process/start).
 */
import WebSocket from 'ws';

export type Json = Record<string, unknown>;

/** A minimal JSON-RPC client over one WebSocket, the same for both servers. */
export class Client {
  readonly #ws: WebSocket;
  #nextId = 1;
  readonly #pending = new Map<number, { resolve: (v: Json) => void; reject: (e: Error) => void }>();
  /** Per process: called for every notification about it. */
  readonly #listeners = new Map<string, (method: string, params: Json) => void>();

  #closedWith: Error | undefined;
  readonly #onClose = new Set<(err: Error) => void>();

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on('close', (code: number, reason: Buffer) => {
      this.#closedWith = new Error(`connection closed: ${code} ${reason.toString()}`);
      for (const p of this.#pending.values()) p.reject(this.#closedWith);
      this.#pending.clear();
      for (const f of this.#onClose) f(this.#closedWith);
    });
    ws.on('message', (data: Buffer) => {
      const msg = JSON.parse(data.toString('utf8')) as Json;
      if (typeof msg['id'] === 'number' && ('result' in msg || 'error' in msg)) {
        const p = this.#pending.get(msg['id']);
        this.#pending.delete(msg['id']);
        if (msg['error']) p?.reject(new Error(JSON.stringify(msg['error'])));
        else p?.resolve(msg['result'] as Json);
        return;
      }
      const params = (msg['params'] ?? {}) as Json;
      const id = params['processId'];
      if (typeof msg['method'] === 'string' && typeof id === 'string') this.#listeners.get(id)?.(msg['method'], params);
    });
  }

  static open(url: string): Promise<Client> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 1024 * 1024 * 1024 });
      ws.once('open', () => resolve(new Client(ws)));
      ws.once('error', reject);
    });
  }

  request(method: string, params: unknown): Promise<Json> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#ws.send(JSON.stringify({ id, method, params }));
    });
  }

  notify(method: string, params: unknown): void {
    this.#ws.send(JSON.stringify({ method, params }));
  }

  /** Starts a process; resolves at `process/closed` with the output bytes seen. */
  async run(processId: string, startParams: Json): Promise<{ bytes: number; exitCode: unknown }> {
    let bytes = 0;
    let messages = 0;
    let exitCode: unknown;
    if (this.#closedWith) throw this.#closedWith;
    const closed = new Promise<void>((resolve, reject) => {
      const onClose = (err: Error): void => reject(err);
      this.#onClose.add(onClose);
      this.#listeners.set(processId, (method, params) => {
        if (method === 'process/output') {
          bytes += Buffer.from(params['chunk'] as string, 'base64').length;
          messages++;
        } else if (method === 'process/exited') exitCode = params['exitCode'];
        else if (method === 'process/closed') {
          this.#onClose.delete(onClose);
          resolve();
        }
      });
    });
    await this.request('process/start', { processId, ...startParams });
    await closed;
    this.#listeners.delete(processId);
    if (process.env['BENCH_DEBUG']) console.error(`${processId}: ${bytes} bytes in ${messages} output messages`);
    return { bytes, exitCode };
  }

  close(): void {
    this.#ws.terminate();
  }
}

/** One of the two servers under comparison. */
export interface Side {
  readonly name: 'ours' | 'reference';
  readonly url: string;
  /** The server's process id, for its CPU time in BENCH_DEBUG lines. */
  readonly pid: number | undefined;
  close(): Promise<void>;
}

/** The workspace-write `sandbox` object as Codex 0.171.0 sends it (see codex-client-trace.md). */
function codexWorkspaceWrite(cwd: string): Json {
  const special = (kind: string, subpath?: string): Json => ({
    type: 'special',
    value: subpath === undefined ? { kind } : { kind, subpath },
  });
  const uri = `file://${cwd}`;
  return {
    permissions: {
      type: 'managed',
      file_system: {
        type: 'restricted',
        entries: [
          { path: special('root'), access: 'read' },
          { path: special('project_roots'), access: 'write' },
          { path: special('slash_tmp'), access: 'write' },
          { path: special('tmpdir'), access: 'write' },
          ...['.git', '.agents', '.codex', '.aws'].map((s) => ({
            path: special('project_roots', s),
            access: 'read',
            missing_path_behavior: 'skip',
          })),
        ],
      },
      network: 'restricted',
    },
    cwd: uri,
    workspaceRoots: [uri],
    windowsSandboxLevel: 'disabled',
    windowsSandboxProxySettingsMode: 'reconcile',
    useLegacyLandlock: false,
  };
}

/** The sandbox setting of both sides (see the header of bench/compare-reference.ts). */
export type Mode = 'none' | 'sandboxed';

/** A client of `side`, initialized for `mode`. */
export async function connect(side: Side, mode: Mode): Promise<Client> {
  const c = await Client.open(side.url);
  const init: Json = { clientName: 'codex-environment', resumeSessionId: null };
  // Ours: the session's server-side policy (the reference has none; it takes the per-call object).
  if (side.name === 'ours')
    init['session'] = { sandbox: mode === 'none' ? { type: 'danger-full-access' } : { type: 'workspace-write' } };
  await c.request('initialize', init);
  c.notify('initialized', {});
  return c;
}

/** `process/start` parameters (but the process id) for `argv` in `cwd`, the same for both sides. */
export function startParams(argv: string[], cwd: string, mode: Mode, tty: boolean): Json {
  return {
    argv,
    cwd: `file://${cwd}`,
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', LC_ALL: 'C.UTF-8' },
    tty,
    pipeStdin: false,
    arg0: null,
    sandbox: mode === 'none' ? null : codexWorkspaceWrite(cwd),
  };
}
