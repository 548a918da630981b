/**
 * Preview ports on the wire (src/preview/): `POST/GET /v1/sessions/:id/ports`,
 * `DELETE /v1/sessions/:id/ports/:port`, and `session/exposePort` / `session/closePort`.
 */
import { Type, type Static } from 'typebox';
import { Params } from './common.ts';

/** `POST /v1/sessions/:id/ports`: the port to expose and how long its signed path is valid. */
export const PortBodySchema = Type.Object(
  {
    port: Type.Integer({ minimum: 1, maximum: 65535, description: 'TCP port inside the session' }),
    ttlSeconds: Type.Optional(
      Type.Integer({
        minimum: 10,
        maximum: 7 * 86_400,
        description: 'Validity of the signed path (default --preview-url-ttl-seconds)',
      }),
    ),
  },
  { additionalProperties: false },
);
/** The path params of `DELETE /v1/sessions/:id/ports/:port`. */
export const PortParamsSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
});
/** An exposed port: where to reach it with a token, and a signed path that needs none until `expiresAt`. */
export const PreviewSchema = Type.Object({
  port: Type.Integer(),
  exposedAt: Type.String(),
  path: Type.String({ description: 'Proxy path (bearer token or signed cookie)' }),
  host: Type.Optional(Type.String({ description: 'Wildcard preview host, with --preview-host' })),
  signedPath: Type.String({ description: 'Opens the port in a browser until expiresAt' }),
  expiresAt: Type.String(),
});
export type PreviewAnswer = Static<typeof PreviewSchema>;

/** `session/exposePort`: the same as the HTTP body, over JSON-RPC. */
export const ExposePortParams = Params({
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
  ttlSeconds: Type.Optional(Type.Integer({ minimum: 10, maximum: 7 * 86_400 })),
});
/** `session/closePort`: the port to close. */
export const ClosePortParams = Params({ port: Type.Integer({ minimum: 1, maximum: 65535 }) });
/** `session/closePort`'s answer; false for a port that was not exposed. */
export const ClosePortResult = Type.Object({ closed: Type.Boolean() });
