/**
 * Preview ports over JSON-RPC, on the connection's session: `session/exposePort {port,
 * ttlSeconds?}` answers what `POST /v1/sessions/:id/ports` answers; `session/closePort {port}`
 * -> `{closed}` (schemas: src/protocol/preview.ts).
 */
import type { Config } from '../config.ts';
import type { Connection } from '../rpc/connection.ts';
import type { MethodTable } from '../rpc/method-table.ts';
import { previewAnswer } from './routes.ts';
import type { PreviewSigner } from './signing.ts';

/** Registers `session/exposePort` and `session/closePort`, the JSON-RPC side of the preview routes. */
export function registerPreviewMethods(
  table: MethodTable<Connection>,
  opts: { config: Config; signer: PreviewSigner },
): void {
  table.add('session/exposePort', async (params, conn) => {
    const session = conn.session;
    const exposed = await session.ports.expose(params.port);
    const scope = conn.deps.principal?.scope;
    return previewAnswer(session, exposed, opts.signer, opts.config, params.ttlSeconds, scope);
  });
  table.add('session/closePort', async (params, conn) => ({ closed: await conn.session.ports.close(params.port) }));
}
