/**
 * `POST /v1/sessions/{id}/tokens` mints a token scoped to that session (session-tokens.ts);
 * `DELETE /v1/sessions/{id}/tokens/{tokenId}` revokes one. Only a tenant token may do either
 * (the auth hook refuses session tokens here): a `read` token must not mint a `full` one.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { validatorCompiler } from './validator.ts';
import type { FastifyInstance } from 'fastify';
import { execError } from '../errors.ts';
import {
  CreateSessionTokenSchema,
  ERROR_RESPONSES,
  SessionParamsSchema,
  SessionTokenParamsSchema,
  SessionTokenSchema,
} from '../protocol/index.ts';
import { DEFAULT_TOKEN_TTL_SECONDS, type SessionTokenSigner } from './session-tokens.ts';
import { bodyOptional } from './typed-api.ts';

/** How session tokens are minted: the key and the longest lifetime allowed. */
export interface TokenRouteOptions {
  readonly signer: SessionTokenSigner;
  readonly maxTtlSeconds: number;
}

/** Registers minting and revoking session tokens (`/v1/sessions/:id/tokens`). */
export async function registerTokenRoutes(app: FastifyInstance, opts: TokenRouteOptions): Promise<void> {
  await app.register(async (scope) => {
    scope.setValidatorCompiler(validatorCompiler);
    const api = scope.withTypeProvider<TypeBoxTypeProvider>();
    api.post(
      '/v1/sessions/:id/tokens',
      {
        schema: {
          operationId: 'createSessionToken',
          tags: ['sessions'],
          summary: 'A token that opens this session only (full or read access) until it expires',
          params: SessionParamsSchema,
          body: CreateSessionTokenSchema,
          response: { 201: SessionTokenSchema, ...ERROR_RESPONSES },
        },
        preValidation: bodyOptional,
      },
      async (request, reply) => {
        const session = app.sessions.get(request.params.id, request.tenant);
        const ttl = request.body.ttlSeconds ?? Math.min(DEFAULT_TOKEN_TTL_SECONDS, opts.maxTtlSeconds);
        if (ttl > opts.maxTtlSeconds)
          throw execError(
            'EXEC_ERR_INVALID_PARAMS',
            `ttlSeconds ${ttl} is above this server's maximum of ${opts.maxTtlSeconds}`,
            { detail: { field: 'ttlSeconds' } },
          );
        const token = opts.signer.issue(session.tenant, session.id, request.body.access ?? 'full', ttl);
        session.audit({
          action: 'token.create',
          detail: { tokenId: token.tokenId, access: token.access, expiresAt: token.expiresAt },
        });
        return reply.code(201).send(token);
      },
    );
    api.delete(
      '/v1/sessions/:id/tokens/:tokenId',
      {
        schema: {
          operationId: 'revokeSessionToken',
          tags: ['sessions'],
          summary: 'Revoke a session token: it opens nothing from now on, on this server and after a restart',
          params: SessionTokenParamsSchema,
          response: { 204: { type: 'null', description: 'Revoked' }, ...ERROR_RESPONSES },
        },
      },
      async (request, reply) => {
        const session = app.sessions.get(request.params.id, request.tenant);
        if (!opts.signer.issuedFor(request.params.tokenId, session.id))
          throw execError(
            'EXEC_ERR_NOT_FOUND',
            `token ${request.params.tokenId} was not issued for session ${session.id} (by this server's key)`,
            { detail: { field: 'tokenId' } },
          );
        // Tokens are not stored, so their expiry is unknown here: the longest a token can
        // live bounds how long the revocation must be kept.
        session.tokens.revoke(request.params.tokenId, Math.floor(Date.now() / 1000) + opts.maxTtlSeconds);
        await session.persistRecord();
        session.audit({ action: 'token.revoke', detail: { tokenId: request.params.tokenId } });
        return reply.code(204).send(null);
      },
    );
  });
}
