/**
 * Tokens scoped to one session (`POST /v1/sessions/{id}/tokens`): what a caller asks for and
 * what it gets. The token itself is opaque to clients; `tokenId` names it for revocation and in
 * the audit log.
 */
import { Type, type Static } from 'typebox';

/** What a session token may do: `full` (everything in the session), `read` (attach, replay output, read files). */
export const TokenAccessSchema = Type.Union([Type.Literal('full'), Type.Literal('read')]);
export type TokenAccess = Static<typeof TokenAccessSchema>;

/** `POST /v1/sessions/:id/tokens`: how long the token lives and what it may do. */
export const CreateSessionTokenSchema = Type.Object(
  {
    /** Validity in seconds; default 3600, at most `--session-token-max-ttl-seconds`. */
    ttlSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 30 * 86_400 })),
    access: Type.Optional(TokenAccessSchema),
  },
  { additionalProperties: false },
);
export type CreateSessionToken = Static<typeof CreateSessionTokenSchema>;

/** A minted session token: the secret once, and the `tokenId` that revokes it. */
export const SessionTokenSchema = Type.Object({
  /** The bearer token: `Authorization: Bearer <token>` (or the WebSocket subprotocol) on this session only. */
  token: Type.String(),
  tokenId: Type.String(),
  access: TokenAccessSchema,
  /** ISO 8601. */
  expiresAt: Type.String(),
});
export type SessionToken = Static<typeof SessionTokenSchema>;

/** The path params of `DELETE /v1/sessions/:id/tokens/:tokenId`. */
export const SessionTokenParamsSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  tokenId: Type.String({ minLength: 1, maxLength: 64 }),
});
