/**
 * The errors answered before any route runs, in the registry's `{code, message}` body with the
 * code's one status (docs/errors.md, docs/protocol.md "Errors"): the router's refusals and
 * Node's. Fastify's defaults answer them in a body format of their own. `createFastify`
 * (src/app.ts) installs them.
 */
import { maxHeaderSize, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionError, FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { execError, httpErrorBody, toExecError } from '../errors.ts';
import {
  ApprovalParamsSchema,
  PortParamsSchema,
  SessionParamsSchema,
  SessionTokenParamsSchema,
  SessionSnapshotParamsSchema,
  SnapshotParamsSchema,
} from '../protocol/index.ts';

/** The schemas of every route's path parameters (`/v1/sessions/:id`, `/v1/snapshots/:id`...). */
const PATH_PARAMS = [
  SessionParamsSchema,
  SnapshotParamsSchema,
  SessionSnapshotParamsSchema,
  SessionTokenParamsSchema,
  ApprovalParamsSchema,
  PortParamsSchema,
];

/**
 * The router's bound on one path segment: every value a route's schema allows must reach that
 * schema (a snapshot id may have 512 characters; the router's default, 100, refused longer ones
 * outside the registry). Twice the longest `maxLength`, as the router counts UTF-16 units and
 * the schemas characters.
 */
export const MAX_PARAM_LENGTH =
  2 *
  Math.max(
    ...PATH_PARAMS.flatMap((s) => Object.values(s.properties).map((p) => (p as { maxLength?: number }).maxLength ?? 0)),
  );

/**
 * The router's own refusals, before any route or hook: a segment past `MAX_PARAM_LENGTH`, a
 * path whose percent-encoding does not decode.
 */
export function frameworkError(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const e =
    error.code === 'FST_ERR_MAX_PARAM_LENGTH'
      ? execError(
          'EXEC_ERR_INVALID_PARAMS',
          `a path segment is longer than ${MAX_PARAM_LENGTH} characters; no id is that long`,
        )
      : error.code === 'FST_ERR_BAD_URL'
        ? execError(
            'EXEC_ERR_INVALID_REQUEST',
            'the request path is not valid percent-encoding (a % must start %XX and the bytes must be UTF-8)',
          )
        : toExecError(error);
  void reply.code(e.statusCode).send(httpErrorBody(e));
}

/**
 * Node's refusals of a request it could not read into one (a head over `maxHeaderSize`, a
 * malformed or unfinished head): no route, hook or reply exists yet, so the answer is written
 * on the socket, then the connection ends, as Fastify's default handler does with its own body.
 */
export function clientError(err: ConnectionError, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const e =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? execError('EXEC_ERR_TOO_LARGE', `request line and headers larger than ${maxHeaderSize} bytes in all`)
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? execError('EXEC_ERR_INVALID_REQUEST', 'request head not complete in time')
        : execError('EXEC_ERR_INVALID_REQUEST', `malformed HTTP request (${err.code ?? err.message})`);
  const body = JSON.stringify(httpErrorBody(e));
  if (socket.writable)
    socket.write(
      `HTTP/1.1 ${e.statusCode} ${STATUS_CODES[e.statusCode]}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  socket.destroy(err);
}
