/**
 * `buildApp(deps)`: the Fastify instance with every route, without listening. Tests build a
 * fresh one per test; `main.ts` adds config loading, listen and graceful shutdown.
 */
import type { IncomingMessage } from 'node:http';
import swagger from '@fastify/swagger';
import websocket from '@fastify/websocket';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Backend } from './backends/types.ts';
import type { Config } from './config.ts';
import { isConsolePath, registerConsole } from './console/routes.ts';
import { selectProtocol } from './console/websocket-token.ts';
import { hostname } from 'node:os';
import { AuditLog } from './audit/audit-log.ts';
import { NO_AUDIT, type Auditor } from './audit/auditor.ts';
import { registerAuthHooks } from './transport/auth-hook.ts';
import { SessionTokenSigner } from './transport/session-tokens.ts';
import { registerTokenRoutes } from './transport/token-routes.ts';
import { codeOfHttpStatus, execError, ExecServerError, httpErrorBody, toExecError } from './errors.ts';
import type { TenantId } from './ids.ts';
import type { Logger } from './logger.ts';
import { registerPreviewMethods } from './preview/rpc-methods.ts';
import { isPreviewProxyRequest, previewRewriter, registerPreviewRoutes } from './preview/routes.ts';
import { PreviewSigner } from './preview/signing.ts';
import { Metrics } from './metrics.ts';
import { connectionTimeouts, limitServerConnections, TenantWebSockets } from './transport/connection-limits.ts';
import type { Connection } from './rpc/connection.ts';
import { httpValidationMessage, MethodTable } from './rpc/method-table.ts';
import { registerFsMethods } from './rpc/methods/fs-methods.ts';
import { registerProcessMethods } from './rpc/methods/process-methods.ts';
import { registerSessionMethods } from './rpc/methods/session-methods.ts';
import { SessionManager } from './sessions/session-manager.ts';
import { createAuthenticator, DEFAULT_TENANT } from './transport/auth.ts';
import { ClientStamp, registerClientAddress } from './transport/client-address.ts';
import { registerFleetForwarding, registerFleetTokenRouting } from './transport/fleet-forward.ts';
import { registerHttpApi } from './transport/http-api.ts';
import { registerFileRoutes } from './transport/http-files.ts';
import { clientError, frameworkError, MAX_PARAM_LENGTH } from './transport/framework-errors.ts';
import { registerJsonBodyParser } from './transport/json-body.ts';
import { foreignOriginMessage, OriginCheck } from './transport/origin.ts';
import { registerWebSocketRoute } from './transport/websocket-route.ts';
import { Drain, keepsSessions, registerDrainGate } from './transport/drain.ts';
import { VERSION } from './version.ts';

declare module 'fastify' {
  interface FastifyRequest {
    tenant: TenantId;
  }
  interface FastifyInstance {
    sessions: SessionManager;
    metrics: Metrics;
    audit: Auditor;
    /** Rollout draining (`--fleet`, `--shutdown-sessions keep`): main.ts starts it on SIGTERM, before `close()`. */
    drain: Drain;
    /**
     * Before `close()` after a fatal error: the sessions stay for the next start, as a killed
     * server leaves them, where the backend can hand them over (docker); true when they do.
     */
    keepSessionsOnClose(): boolean;
  }
}

export interface AppDeps {
  readonly config: Config;
  readonly backend: Backend;
  /** A pino logger (main.ts: JSON on stderr); absent in tests, where pino lines would clutter node:test output. */
  readonly logger?: FastifyBaseLogger;
  readonly metrics?: Metrics;
  /** The audit log; default: `--audit-log` (opened here, closed with the app) or none. */
  readonly audit?: Auditor;
  /** `--audit-log -`: hold the lines until `app.audit.release()` (main.ts prints its address first). */
  readonly holdAuditStdout?: boolean;
}

const PUBLIC_ROUTES = new Set(['/healthz', '/readyz']);

/** Fastify's `rewriteUrl` option, only when there is a rewrite (the wildcard preview host). */
function withRewrite(rewrite: ((req: IncomingMessage) => string) | undefined): {
  rewriteUrl?: (req: IncomingMessage) => string;
} {
  return rewrite ? { rewriteUrl: rewrite } : {};
}

/**
 * The first request hook, before any token or session: browsers let any page open a WebSocket
 * anywhere and send simple requests (a bodiless POST creates a session) anywhere; only the
 * Origin tells whose page it is. A preview application's own requests are its business, its
 * WebSockets not.
 */
/** `/readyz`'s answer when not ready: 503, with EXEC_ERR_BACKEND_UNAVAILABLE (whose status that is). */
function notReady(reply: FastifyReply, e: ExecServerError): FastifyReply {
  return reply.code(e.statusCode).send(httpErrorBody(e));
}

function originGate(
  origins: OriginCheck,
): (request: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply | undefined> {
  return async (request, reply) => {
    // Any upgrade the server took (request.ws), whatever its protocol: the preview proxy tunnels each.
    const upgrade = request.ws || request.headers.upgrade?.toLowerCase() === 'websocket';
    const preview = isPreviewProxyRequest(request.method, request.url);
    if ((upgrade || !preview) && !origins.allows(request.raw)) {
      const e = execError('EXEC_ERR_ORIGIN_FORBIDDEN', foreignOriginMessage(request.raw));
      await reply.code(e.statusCode).send(httpErrorBody(e));
      return reply;
    }
    return undefined;
  };
}

/**
 * HTTP answers after the audit lines recorded before them, as the WebSocket route's frames
 * (src/audit/audit-barrier.ts): with `--audit-log` only.
 */
function waitForAuditLines(app: FastifyInstance, audit: Auditor): void {
  if (!audit.enabled) return;
  app.addHook('onSend', async (_request, _reply, payload) => {
    await audit.settled();
    return payload;
  });
}

/** One line per request, at debug: at info the log would be mostly requests within minutes. */
function logRequests(app: FastifyInstance): void {
  app.addHook('onResponse', async (request, reply) => {
    request.log.debug(
      {
        method: request.method,
        url: request.url.split('?')[0],
        statusCode: reply.statusCode,
        ms: Math.round(reply.elapsedTime),
      },
      'request',
    );
  });
}

/** Every error leaves as the registry has it: `{code, message}` with the code's one status. */
function setErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((error, request, reply) => {
    if (error instanceof ExecServerError) {
      if (error.statusCode >= 500) request.log.error({ err: error }, 'request failed');
      return reply.code(error.statusCode).send(httpErrorBody(error));
    }
    const err = error as Error & { validation?: unknown; statusCode?: number };
    if (err.validation)
      return reply.code(400).send(httpErrorBody(execError('EXEC_ERR_INVALID_PARAMS', httpValidationMessage(err))));
    // The framework's own 4xx (body too large, malformed JSON, wrong content type): our code, and
    // that code's one status (a 415 of the framework is answered 400 EXEC_ERR_INVALID_REQUEST).
    const status = err.statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      const e = execError(codeOfHttpStatus(status), err.message, { cause: err });
      return reply.code(e.statusCode).send(httpErrorBody(e));
    }
    request.log.error({ err: error }, 'request failed');
    const e = toExecError(error);
    return reply.code(e.statusCode).send(httpErrorBody(e));
  });
}

/** `/healthz` (the process is up), `/readyz` (the backend answers, the audit log can be written), `/metrics`. */
function registerProbes(app: FastifyInstance, backend: Backend, audit: Auditor, metrics: Metrics): void {
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { hide: true } }, async (_request, reply) => {
    try {
      await backend.ping();
      const reason =
        (audit instanceof AuditLog ? audit.notReadyReason() : undefined) ?? (await backend.notReadyReason?.());
      if (reason !== undefined) return notReady(reply, execError('EXEC_ERR_BACKEND_UNAVAILABLE', reason));
      const engines = backend.engines?.();
      return { status: 'ready', backend: backend.kind, ...(engines === undefined ? {} : { engines }) };
    } catch (err) {
      // Not ready, whatever the engine said: 503 with the code of that status, the failure as its cause.
      const e = toExecError(err);
      return notReady(
        reply,
        e.code === 'EXEC_ERR_BACKEND_UNAVAILABLE'
          ? e
          : execError('EXEC_ERR_BACKEND_UNAVAILABLE', e.message, { cause: err }),
      );
    }
  });
  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    return reply.header('content-type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
}

/** The WebSocket protocol, the REST API, the files, the console, MCP and the preview routes. */
async function registerRoutes(
  app: FastifyInstance,
  deps: {
    config: Config;
    sessions: SessionManager;
    metrics: Metrics;
    tokenSigner: SessionTokenSigner;
    signer: PreviewSigner;
    drain: Drain;
  },
): Promise<void> {
  const { config, sessions, metrics, tokenSigner, signer, drain } = deps;
  const table = new MethodTable<Connection>();
  registerSessionMethods(table);
  registerProcessMethods(table);
  registerFsMethods(table);
  registerPreviewMethods(table, { config, signer });
  registerWebSocketRoute(app, {
    table,
    metrics,
    bufferLimitBytes: config.wsBufferLimitBytes,
    tenantSockets: new TenantWebSockets(config.maxWebsocketsPerTenant, metrics.connectionsRefused),
    drain,
    deps: { sessions, config, metrics, version: VERSION },
  });
  await registerTokenRoutes(app, { signer: tokenSigner, maxTtlSeconds: config.sessionTokenMaxTtlSeconds });
  await registerHttpApi(app);
  await registerFileRoutes(app);
  registerConsole(app);
  // Loaded on first use: the MCP SDK and its dependencies take a while to evaluate, which every
  // importer of this module (CLI client commands, tests) would otherwise pay at load time.
  const { registerMcpEndpoint } = await import('./mcp/endpoint.ts');
  registerMcpEndpoint(app, { config, signer });
  if (sessions.backend.fleet !== undefined) {
    // The owner's side of an MCP tool call made on another replica of the fleet.
    const { registerForwardedCalls } = await import('./mcp/forwarded-calls.ts');
    await registerForwardedCalls(app, { config, signer });
  }
  await registerPreviewRoutes(app, { config, signer, sessionTokens: tokenSigner });
}

/**
 * Startup re-adopts the sessions; shutdown ends them, then the backend and the audit log the app
 * opened. `keep` (a fleet, or `--shutdown-sessions keep`): the sessions stay in the engine for the
 * next server; the backend hands them over as a killed server would, instead of removing them.
 */
function addLifecycleHooks(
  app: FastifyInstance,
  o: { config: Config; sessions: SessionManager; backend: Backend; ownAudit: Auditor | undefined },
): void {
  const { sessions, backend } = o;
  app.addHook('onReady', async () => {
    await sessions.start();
  });
  const shutdown = { keep: keepsSessions(o.config, backend) };
  app.decorate('keepSessionsOnClose', () => {
    if (backend.handOver !== undefined) shutdown.keep = true;
    return shutdown.keep;
  });
  app.addHook('preClose', async () => {
    await sessions.close({ keep: shutdown.keep });
  });
  app.addHook('onClose', async () => {
    await (shutdown.keep && backend.handOver ? backend.handOver() : backend.close());
    if (o.ownAudit instanceof AuditLog) await o.ownAudit.close();
  });
}

/** How long startup (recovery included) may take before the server gives up. */
const STARTUP_TIMEOUT_MS = 10 * 60_000;

/**
 * The Fastify instance: the app's logger, body limit and startup bound, preview hosts
 * rewritten, and the errors answered before any route in the registry's format.
 */
function createFastify(deps: AppDeps): FastifyInstance {
  const { config } = deps;
  return Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    bodyLimit: config.maxMessageBytes,
    ...connectionTimeouts(config), // how long a connection may hold its place idle (connection-limits.ts)
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: frameworkError,
    clientErrorHandler: clientError,
    return503OnClosing: true,
    forceCloseConnections: true,
    // The onReady hook re-adopts every container of the instance (bounded engine calls each) and
    // may first wait up to 60 s for the instance lease (a rolling restart): Fastify's 10 s
    // default would fail such a start. Still bounded.
    pluginTimeout: STARTUP_TIMEOUT_MS,
    logController: new LogController({ disableRequestLogging: true }),
    ...withRewrite(previewRewriter(config.previewHost)),
  });
}

/** The audit log `--audit-log` names, or none. */
async function openAudit(
  config: Config,
  holdStdout: boolean | undefined,
  metrics: Metrics,
  log: Logger,
): Promise<Auditor> {
  return config.auditLog === undefined
    ? NO_AUDIT
    : await AuditLog.open(config.auditLog, {
        server: `${hostname()}/${config.instanceId}`,
        version: VERSION,
        maxQueueLines: config.auditQueueLines,
        maxFileBytes: config.auditLogMaxBytes,
        maxFiles: config.auditLogMaxFiles,
        holdStdout,
        metrics,
        log,
      });
}

/** The backend's gauges read at scrape time: its engines, memory checkpoints and warm pools, where it has them. */
function watchBackend(metrics: Metrics, backend: Backend): void {
  const engines = backend.engines?.bind(backend);
  if (engines !== undefined) metrics.watchEngines(engines);
  const checkpoints = backend.memoryCheckpoints?.bind(backend);
  if (checkpoints !== undefined) metrics.watchCheckpoints(checkpoints);
  const warmPools = backend.warmPools?.bind(backend);
  if (warmPools !== undefined) metrics.watchWarmPools(warmPools);
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const { config, backend } = deps;
  const auth = createAuthenticator(config);
  const origins = new OriginCheck({
    allowedOrigins: config.allowedOrigins,
    tokens: auth.enabled,
    previewHost: config.previewHost,
  });
  const metrics = deps.metrics ?? new Metrics();
  watchBackend(metrics, backend);
  const app = createFastify(deps);
  registerJsonBodyParser(app);
  const log = app.log as unknown as Logger;
  const audit = deps.audit ?? (await openAudit(config, deps.holdAuditStdout, metrics, log));
  const sessions = new SessionManager(backend, config, metrics, log, audit);
  // Session tokens outlive a restart and reach every replica when the key does: an explicit
  // secret, else one derived from the tenant tokens every replica is configured with. The
  // replicas' client stamps use the same secret (each key has a purpose of its own).
  const fleetSecret = config.sessionTokenSecret ?? auth.tokensDigest;
  const tokenSigner = new SessionTokenSigner(fleetSecret);
  // Signed preview URLs likewise (a key of its own purpose from the same digest).
  const signer = new PreviewSigner(config.previewSecret ?? auth.tokensDigest);
  app.decorate('sessions', sessions);
  app.decorate('metrics', metrics);
  app.decorate('audit', audit);
  const drain = new Drain();
  app.decorate('drain', drain);
  app.decorateRequest('tenant', DEFAULT_TENANT);

  await app.register(swagger, {
    openapi: {
      info: { title: 'exec-server', version: VERSION, description: 'Runs commands for AI coding agents remotely.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }],
    },
  });
  // Registered before the auth hook: its own onRequest hook marks upgrade requests, so a
  // refused upgrade (401) gets its socket destroyed instead of lingering past shutdown.
  // handleProtocols: browsers send their token as a subprotocol (console/websocket-token.ts).
  await app.register(websocket, { options: { maxPayload: config.maxMessageBytes, handleProtocols: selectProtocol } });

  // Before anything else runs for a request: one past the server's connections is only refused.
  limitServerConnections(app, config, metrics.connectionsRefused);
  // Then the audit names a forwarded request's client, which its replica vouched for.
  registerClientAddress(app, new ClientStamp(fleetSecret));
  registerDrainGate(app, drain);
  app.addHook('onRequest', originGate(origins));
  // Before authentication: a session token of a session another replica owns is checked there.
  const elsewhere = registerFleetTokenRouting(app, tokenSigner);
  registerAuthHooks(app, {
    elsewhere,
    auth,
    signer: tokenSigner,
    findSession: (id) => sessions.find(id),
    audit,
    // Preview proxies authenticate themselves (a signed URL, a session token or the bearer token).
    skip: (method, url, path) => PUBLIC_ROUTES.has(path) || isConsolePath(path) || isPreviewProxyRequest(method, url),
  });

  // A replica of a fleet sends the requests for another live replica's sessions there.
  registerFleetForwarding(app);

  logRequests(app);

  setErrorHandlers(app);
  app.setNotFoundHandler((request, reply) => {
    const e = execError('EXEC_ERR_NOT_FOUND', `no route ${request.method} ${request.url}`);
    return reply.code(e.statusCode).send(httpErrorBody(e));
  });

  registerProbes(app, backend, audit, metrics);
  waitForAuditLines(app, audit);

  await registerRoutes(app, { config, sessions, metrics, tokenSigner, signer, drain });

  addLifecycleHooks(app, { config, sessions, backend, ownAudit: deps.audit === undefined ? audit : undefined });
  return app;
}
