/**
 * The `application/json` body parser of every route. Fastify's default decodes the body with
 * replacement, so invalid UTF-8 became U+FFFD and the request went on with data the client never
 * sent (a file's content, an env value, an argument); and its prototype-poisoning guard refused a
 * `__proto__` key as "Body is not valid JSON", without the reason. Here the bytes are decoded
 * strictly (refused with the offset of the first bad byte, as the WebSocket path closes with 1007)
 * and parsed as the WebSocket path parses a frame. The body limit stays Fastify's: a parser
 * added without one gets the server's `bodyLimit`, enforced while the body is read.
 */
import { errorCodes, type FastifyInstance, type FastifyRequest } from 'fastify';
import { execError, type ExecServerError } from '../errors.ts';
import { MCP_PATH } from '../protocol/index.ts';

const strict = new TextDecoder('utf-8', { fatal: true });

/** The second byte's range after a lead byte (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). */
function secondByteRange(lead: number): [number, number] {
  if (lead === 0xe0) return [0xa0, 0xbf];
  if (lead === 0xed) return [0x80, 0x9f];
  if (lead === 0xf0) return [0x90, 0xbf];
  if (lead === 0xf4) return [0x80, 0x8f];
  return [0x80, 0xbf];
}

/** The offset of the first byte that starts no valid UTF-8 sequence; -1 if there is none. */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = 0;
  while (i < bytes.length) {
    const lead = bytes[i] ?? 0;
    const tail = lead < 0x80 ? 0 : lead >= 0xc2 && lead <= 0xdf ? 1 : lead >= 0xe0 && lead <= 0xef ? 2 : 3;
    if (lead >= 0x80 && (lead < 0xc2 || lead > 0xf4)) return i;
    const [min, max] = secondByteRange(lead);
    for (let k = 1; k <= tail; k++) {
      const b = bytes[i + k];
      if (b === undefined || b < (k === 1 ? min : 0x80) || b > (k === 1 ? max : 0xbf)) return i;
    }
    i += tail + 1;
  }
  return -1;
}

/** The refusal of a key that the MCP path does not take (see `parseJsonBody`). */
function keyRefusal(key: '__proto__' | 'constructor'): ExecServerError {
  const what = key === '__proto__' ? 'the key "__proto__"' : 'the key "constructor" holding a "prototype"';
  return execError('EXEC_ERR_INVALID_REQUEST', `${what} is not accepted in a JSON body on ${MCP_PATH}`);
}

/**
 * `text` parsed. `__proto__` is an own data key, as `JSON.parse` makes it on the WebSocket path:
 * no prototype is ever set, and the same params mean the same on both transports (an env
 * variable named `__proto__` reaches the command either way; a body key no schema declares is
 * refused by the schema, naming it). MCP's SDK is the exception: its request schemas drop an
 * undeclared `__proto__` key without a word (a tool call's argument of that name would vanish),
 * so there the key (and `constructor.prototype`, which Fastify's guard also refused) is refused,
 * saying so, instead of being silently lost.
 */
function parseJsonBody(request: FastifyRequest, text: string): unknown {
  if (request.routeOptions.url !== MCP_PATH) return JSON.parse(text);
  let refused: ExecServerError | undefined;
  const value: unknown = JSON.parse(text, (key, v: unknown) => {
    if (key === '__proto__') refused ??= keyRefusal('__proto__');
    else if (key === 'constructor' && typeof v === 'object' && v !== null && Object.hasOwn(v, 'prototype'))
      refused ??= keyRefusal('constructor');
    return v;
  });
  if (refused !== undefined) throw refused;
  return value;
}

/** Replaces Fastify's `application/json` parser; before any route, so every scope inherits it. */
export function registerJsonBodyParser(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const bytes = body as Buffer;
    // As Fastify's parser did: an empty body is its own 400, not a parse error.
    if (bytes.length === 0) return done(new errorCodes.FST_ERR_CTP_EMPTY_JSON_BODY(), undefined);
    let text: string;
    try {
      text = strict.decode(bytes);
    } catch {
      const at = firstInvalidUtf8(bytes);
      const e = execError(
        'EXEC_ERR_INVALID_REQUEST',
        `the request body is not valid UTF-8 (invalid byte at offset ${at}); JSON bodies must be UTF-8`,
      );
      return done(e, undefined);
    }
    let value: unknown;
    try {
      value = parseJsonBody(request, text);
    } catch (err) {
      // Fastify's own error and message for malformed JSON, as before.
      return done(
        err instanceof SyntaxError ? new errorCodes.FST_ERR_CTP_INVALID_JSON_BODY() : (err as Error),
        undefined,
      );
    }
    done(null, value);
  });
}
