/**
 * Preview ports over JSON-RPC, on the connection's session: `session/exposePort {port,
 * ttlSeconds?}` answers what `POST /v1/sessions/:id/ports` answers; `session/closePort {port}`
 * -> `{closed}`.
 */
import { Type } from 'typebox';
import type { Config } from '../config.ts';
import type { Connection } from '../rpc/connection.ts';
import { defineMethod, type MethodTable } from '../rpc/method-table.ts';
import { Params } from '../rpc/schemas.ts';
import { closePort, exposePort } from './ports.ts';
import { previewAnswer } from './routes.ts';
import type { PreviewSigner } from './signing.ts';

const Port = Type.Integer({ minimum: 1, maximum: 65535 });

export function registerPreviewMethods(table: MethodTable<Connection>, opts: { config: Config; signer: PreviewSigner }): void {
  table.add(
    'session/exposePort',
    defineMethod({
      requires: 'initialized',
      schema: Params({ port: Port, ttlSeconds: Type.Optional(Type.Integer({ minimum: 10, maximum: 7 * 86_400 })) }),
      handler: (params, conn) => {
        const session = conn.session;
        return previewAnswer(session, exposePort(session, params.port), opts.signer, opts.config, params.ttlSeconds);
      },
    }),
  );
  table.add(
    'session/closePort',
    defineMethod({
      requires: 'initialized',
      schema: Params({ port: Port }),
      handler: (params, conn) => ({ closed: closePort(conn.session, params.port) }),
    }),
  );
}
