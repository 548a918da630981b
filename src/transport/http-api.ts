/**
 * REST API under /v1: sessions, snapshots, the unified-exec tool facade (src/tools/) and the
 * OpenAPI document generated from the route schemas (`GET /docs/openapi.json`). Routes are
 * validated with TypeBox (`@fastify/type-provider-typebox`); every error is `{code, message}`
 * with a stable `EXEC_ERR_*` code, mapped by the app's error handler. Another tenant's
 * session or snapshot does not exist for the caller (404).
 */
import { LOCAL_ONLY_HEADER } from './fleet-forward.ts';
import { fleetSessionInfos } from './fleet-list.ts';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { validatorCompiler } from './validator.ts';
import type { FastifyInstance } from 'fastify';
import {
  ERROR_RESPONSES,
  ForkAnswerSchema,
  ForkBodySchema,
  HibernationAnswerSchema,
  ImagePullListSchema,
  SessionCreateQuerySchema,
  SessionCreateResultSchema,
  SessionInfoSchema,
  SessionListQuerySchema,
  SessionListSchema,
  SessionParamsSchema,
  SessionSnapshotParamsSchema,
  SessionSpecSchema,
  SnapshotBodySchema,
  SnapshotInfoSchema,
  SnapshotListSchema,
  SnapshotParamsSchema,
} from '../protocol/index.ts';
import { execError } from '../errors.ts';
import type { TenantId } from '../ids.ts';
import { registerToolRoutes } from './tool-routes.ts';
import { bodyOptional, type TypedApi } from './typed-api.ts';

const errors = ERROR_RESPONSES;

/** Registers the REST API of sessions, snapshots and images, and the OpenAPI document. */
export async function registerHttpApi(app: FastifyInstance): Promise<void> {
  app.get('/docs/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  await app.register(async (scope) => {
    scope.setValidatorCompiler(validatorCompiler);
    const api = scope.withTypeProvider<TypeBoxTypeProvider>();
    sessionRoutes(api, app);
    oneSessionRoutes(api, app);
    snapshotRoutes(api, app);
    snapshotListRoutes(api, app);
    sessionSnapshotRoutes(api, app);
    registerToolRoutes(scope);
  });
}

/** Sessions: create and list. */
function sessionRoutes(api: TypedApi, app: FastifyInstance) {
  api.post(
    '/v1/sessions',
    {
      schema: {
        operationId: 'createSession',
        tags: ['sessions'],
        summary:
          'Create a session (same spec as initialize.session); `?count=N`: N sessions of that spec, all or none, as a list',
        body: SessionSpecSchema,
        querystring: SessionCreateQuerySchema,
        response: { 201: SessionCreateResultSchema, ...errors },
      },
      // An empty body means "all defaults".
      preValidation: bodyOptional,
    },
    async (request, reply) => {
      const options = { tenant: request.tenant, clientName: request.headers['x-client-name']?.toString() };
      const count = request.query.count;
      if (count !== undefined) {
        const sessions = await app.sessions.createMany(request.body, count, options);
        return reply.code(201).send({ sessions: sessions.map((s) => s.info()) });
      }
      const session = await app.sessions.create(request.body, options);
      return reply.code(201).send(session.info());
    },
  );

  api.get(
    '/v1/sessions',
    {
      schema: {
        operationId: 'listSessions',
        tags: ['sessions'],
        summary: "The caller's sessions",
        querystring: SessionListQuerySchema,
        response: { 200: SessionListSchema, ...errors },
      },
    },
    async (request) => {
      const usage = request.query.usage === true;
      // A replica of a fleet lists the tenant's sessions of every replica (fleet-list.ts); one
      // asked for its own, by another replica gathering the list, answers them alone.
      const ask = {
        sessions: app.sessions,
        query: new URL(request.url, 'http://x').search,
        authorization: request.headers.authorization,
      };
      const fleet =
        request.headers[LOCAL_ONLY_HEADER] === undefined
          ? await fleetSessionInfos(ask, request.tenant, async ({ session: s }) =>
              usage ? { ...s.info(), usage: await s.usage.sample() } : s.info(),
            )
          : undefined;
      if (fleet !== undefined) return { sessions: fleet };
      const sessions = app.sessions.list(request.tenant);
      if (!usage) return { sessions: sessions.map((s) => s.info()) };
      return {
        sessions: await Promise.all(sessions.map(async (s) => ({ ...s.info(), usage: await s.usage.sample() }))),
      };
    },
  );
}

/** One session: read, delete, hibernate and wake. */
function oneSessionRoutes(api: TypedApi, app: FastifyInstance) {
  api.get(
    '/v1/sessions/:id',
    {
      schema: {
        operationId: 'getSession',
        tags: ['sessions'],
        summary: 'One session, with its resource use',
        params: SessionParamsSchema,
        response: { 200: SessionInfoSchema, ...errors },
      },
    },
    async (request) => {
      const session = app.sessions.get(request.params.id, request.tenant);
      return { ...session.info(), usage: await session.usage.sample() };
    },
  );

  api.delete(
    '/v1/sessions/:id',
    {
      schema: {
        operationId: 'deleteSession',
        tags: ['sessions'],
        summary: 'Delete a session: its processes are killed and its workspace or container removed',
        params: SessionParamsSchema,
        response: { 204: { type: 'null', description: 'Deleted' }, ...errors },
      },
    },
    async (request, reply) => {
      await app.sessions.destroy(request.params.id, request.tenant);
      return reply.code(204).send(null);
    },
  );

  // Hibernation: the session's own transition, answered with its state.
  const hibernation = [
    [
      'hibernate',
      'hibernateSession',
      "Checkpoint the session's container with its memory and stop it (docker, gVisor runtime); the next call that needs it wakes it",
    ],
    ['wake', 'wakeSession', 'Restore a hibernated session: what ran in it goes on where it was'],
  ] as const;
  for (const [action, operationId, summary] of hibernation) {
    api.post(
      `/v1/sessions/:id/${action}`,
      {
        schema: {
          operationId,
          tags: ['sessions'],
          summary,
          params: SessionParamsSchema,
          response: { 200: HibernationAnswerSchema, ...errors },
        },
      },
      async (request) => app.sessions.get(request.params.id, request.tenant)[action](),
    );
  }
}

/** Snapshots and forks. */
function snapshotRoutes(api: TypedApi, app: FastifyInstance) {
  api.post(
    '/v1/sessions/:id/snapshots',
    {
      schema: {
        operationId: 'snapshotSession',
        tags: ['snapshots'],
        summary: "Commit the session's filesystem to a snapshot (docker backend)",
        params: SessionParamsSchema,
        body: SnapshotBodySchema,
        response: { 201: SnapshotInfoSchema, ...errors },
      },
      preValidation: bodyOptional,
    },
    async (request, reply) => {
      const session = app.sessions.get(request.params.id, request.tenant);
      const snapshot = await session.snapshot(request.body.name, request.body.memory === true);
      return reply.code(201).send(snapshot);
    },
  );

  api.post(
    '/v1/sessions/:id/fork',
    {
      schema: {
        operationId: 'forkSession',
        tags: ['snapshots'],
        summary:
          'Fork the session `count` ways: new sessions from a snapshot of it; with `memory` (gVisor) its processes run on in each',
        params: SessionParamsSchema,
        body: ForkBodySchema,
        response: { 201: ForkAnswerSchema, ...errors },
      },
      preValidation: bodyOptional,
    },
    async (request, reply) => {
      const source = app.sessions.get(request.params.id, request.tenant);
      const b = request.body;
      const forked = await app.sessions.fork(source, {
        count: b.count ?? 1,
        memory: b.memory === true,
        name: b.name,
      });
      return reply.code(201).send({ snapshot: forked.snapshot, sessions: forked.sessions.map((s) => s.info()) });
    },
  );
}

/** Deletes a snapshot and records it in the audit log (the caller is the request's). */
async function deleteAudited(app: FastifyInstance, snapshotId: string, tenant: TenantId, session: string | undefined) {
  await app.sessions.backend.deleteSnapshot(snapshotId, tenant);
  app.sessions.audit.record({ action: 'snapshot.delete', tenant, session, detail: { snapshot: snapshotId } });
}

/**
 * The snapshots taken of one session, listed and deleted under the session's own path. A session
 * token opens only its session's routes (src/transport/principal.ts), and in a fleet these go
 * to the session's owner, which checks the token's revocations: so the holder of a `full` token
 * can manage the snapshots it may take (they count against the tenant's quota), and no other.
 */
function sessionSnapshotRoutes(api: TypedApi, app: FastifyInstance) {
  const ofSession = async (id: string, tenant: TenantId) => {
    app.sessions.get(id, tenant); // 404 for a session that is not the caller's
    return (await app.sessions.backend.listSnapshots(tenant)).filter((s) => s.sessionId === id);
  };
  api.get(
    '/v1/sessions/:id/snapshots',
    {
      schema: {
        operationId: 'listSessionSnapshots',
        tags: ['snapshots'],
        summary: 'The snapshots taken of this session (its forks included)',
        params: SessionParamsSchema,
        response: { 200: SnapshotListSchema, ...errors },
      },
    },
    async (request) => ({ snapshots: await ofSession(request.params.id, request.tenant) }),
  );

  api.delete(
    '/v1/sessions/:id/snapshots/:snapshotId',
    {
      schema: {
        operationId: 'deleteSessionSnapshot',
        tags: ['snapshots'],
        summary: 'Delete a snapshot taken of this session (its id as listed)',
        params: SessionSnapshotParamsSchema,
        response: { 204: { type: 'null', description: 'Deleted' }, ...errors },
      },
    },
    async (request, reply) => {
      const { id, snapshotId } = request.params;
      // The id as listed (`sha256:…`, or its hex alone): a prefix or a name could name another
      // session's snapshot by the time the delete runs.
      const own = (await ofSession(id, request.tenant)).find(
        (s) => s.snapshotId === snapshotId || s.snapshotId === `sha256:${snapshotId}`,
      );
      if (own === undefined) throw execError('EXEC_ERR_NOT_FOUND', `snapshot ${snapshotId} of session ${id} not found`);
      await deleteAudited(app, own.snapshotId, request.tenant, id);
      return reply.code(204).send(null);
    },
  );
}

/** Snapshots: list and delete; the image pulls under way. */
function snapshotListRoutes(api: TypedApi, app: FastifyInstance) {
  api.get(
    '/v1/snapshots',
    {
      schema: {
        operationId: 'listSnapshots',
        tags: ['snapshots'],
        summary: "The caller's snapshots",
        response: { 200: SnapshotListSchema, ...errors },
      },
    },
    async (request) => ({ snapshots: await app.sessions.backend.listSnapshots(request.tenant) }),
  );

  api.delete(
    '/v1/snapshots/:id',
    {
      schema: {
        operationId: 'deleteSnapshot',
        tags: ['snapshots'],
        summary: 'Delete a snapshot',
        params: SnapshotParamsSchema,
        response: { 204: { type: 'null', description: 'Deleted' }, ...errors },
      },
    },
    async (request, reply) => {
      await deleteAudited(app, request.params.id, request.tenant, undefined);
      return reply.code(204).send(null);
    },
  );

  api.get(
    '/v1/images/pulls',
    {
      schema: {
        operationId: 'listImagePulls',
        tags: ['sessions'],
        summary:
          "Image pulls in flight that the caller's session creations wait for (a POST /v1/sessions blocks until its pull ends)",
        response: { 200: ImagePullListSchema, ...errors },
      },
    },
    async (request) => ({ pulls: app.sessions.backend.imagePulls?.(request.tenant) ?? [] }),
  );
}
