/**
 * Preview ports on the wire (src/preview/): `POST/GET /v1/sessions/:id/ports`,
 * `DELETE /v1/sessions/:id/ports/:port`, and `session/exposePort` / `session/closePort`.
 */
import { Type, type Static } from 'typebox';
import { Params } from './common.ts';

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
export const PortParamsSchema = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
});
export const PreviewSchema = Type.Object({
  port: Type.Integer(),
  exposedAt: Type.String(),
  path: Type.String({ description: 'Proxy path (bearer token or signed cookie)' }),
  host: Type.Optional(Type.String({ description: 'Wildcard preview host, with --preview-host' })),
  signedPath: Type.String({ description: 'Opens the port in a browser until expiresAt' }),
  expiresAt: Type.String(),
});
export type PreviewAnswer = Static<typeof PreviewSchema>;

export const ExposePortParams = Params({
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
  ttlSeconds: Type.Optional(Type.Integer({ minimum: 10, maximum: 7 * 86_400 })),
});
export const ClosePortParams = Params({ port: Type.Integer({ minimum: 1, maximum: 65535 }) });
export const ClosePortResult = Type.Object({ closed: Type.Boolean() });
