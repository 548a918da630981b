/**
 * Files of a session over HTTP, under `/v1/sessions/:id/files`: streamed download and upload,
 * metadata, listing, canonical path, remove, copy and mkdir. Same checks as `fs/*` (everything
 * goes through `SessionFiles`). Bodies of uploads are never buffered: the request stream goes
 * straight into the backend's `writeStream`. Auth and tenant come from the app's onRequest hook;
 * another tenant's session is a 404.
 */
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Static, TSchema } from 'typebox';
import { execError } from '../errors.ts';
import {
  CopyBodySchema,
  DownloadBodySchema,
  DownloadQuerySchema,
  EmptyResult,
  ERROR_RESPONSES,
  FileMetadataSchema,
  FilePathQuerySchema,
  FsCanonicalizeResult,
  FsReadDirectoryResult,
  MkdirBodySchema,
  RemoveQuerySchema,
  SessionParamsSchema,
  UploadResultSchema,
} from '../protocol/index.ts';
import type { Session } from '../sessions/session.ts';
import type { SessionFiles } from '../sessions/files/session-files.ts';
import type { TypedApi } from './typed-api.ts';
import { validatorCompiler } from './validator.ts';

const errors = ERROR_RESPONSES;
const TAGS = ['files'];

/**
 * A download body of exactly the `length` bytes its Content-Length announced. Bytes of a file
 * that grew meanwhile are left out (past the length they broke the HTTP framing of the
 * connection), and the read stops at the length: a file that keeps growing (a log being
 * written) would otherwise hold the answer open, reading bytes only to drop them. A file that
 * shrank fails the body, so the client sees a cut transfer instead of waiting for bytes that
 * never come.
 */
export function exactly(source: NodeJS.ReadableStream, length: number, path: string): Readable {
  return Readable.from(firstBytes(source, length, path), { objectMode: false });
}

async function* firstBytes(source: NodeJS.ReadableStream, length: number, path: string): AsyncGenerator<Buffer> {
  let left = length;
  try {
    if (left > 0)
      for await (const chunk of source as AsyncIterable<Buffer>) {
        const part = chunk.subarray(0, left);
        left -= part.length;
        yield part;
        if (left === 0) break;
      }
  } finally {
    // Ends the backend's reader however the body ends (its length reached, the client gone):
    // a file handle closed, a command in the container killed.
    (source as Readable).destroy();
  }
  if (left > 0) throw execError('EXEC_ERR_FS', `${path} shrank by ${left} bytes while it was downloaded`);
}

/** The options of a route on a session's path (`?path=`) answering `result`. */
function onPath<R extends TSchema>(summary: string, result: R) {
  return {
    schema: {
      tags: TAGS,
      summary,
      params: SessionParamsSchema,
      querystring: FilePathQuerySchema,
      response: { 200: result, ...errors },
    },
  };
}

/** The session a file route names (kept alive by the call) and its files. */
function filesOf(
  scope: FastifyInstance,
  request: FastifyRequest<{ Params: { id: string } }>,
): { files: SessionFiles; session: Session } {
  const session = scope.sessions.get(request.params.id, request.tenant);
  session.touch();
  return { session, files: session.files };
}

/** Registers the file routes in their own scope (its octet-stream parser stays local to them). */
export async function registerFileRoutes(app: FastifyInstance): Promise<void> {
  await app.register(async (scope) => {
    // Uploads: hand the raw request stream to the handler, unbuffered and unparsed.
    scope.addContentTypeParser('application/octet-stream', (_request, payload, done) => done(null, payload));
    scope.setValidatorCompiler(validatorCompiler);
    const r = scope.withTypeProvider<TypeBoxTypeProvider>();
    transferRoutes(scope, r);
    listingRoutes(scope, r);
    changeRoutes(scope, r);
    directoryRoutes(scope, r);
  });
}

/** Downloads and uploads. */
function transferRoutes(scope: FastifyInstance, r: TypedApi) {
  // The answer is a stream, which the typed reply (a string, as OpenAPI says) cannot take:
  // this one route names its request types itself.
  scope.get<{ Params: Static<typeof SessionParamsSchema>; Querystring: Static<typeof DownloadQuerySchema> }>(
    '/v1/sessions/:id/files/content',
    {
      schema: {
        tags: TAGS,
        summary: 'Download a file (streamed)',
        params: SessionParamsSchema,
        querystring: DownloadQuerySchema,
        response: { 200: DownloadBodySchema, ...errors },
      },
    },
    async (request, reply) => {
      const { files } = filesOf(scope, request);
      const offset = request.query.offset ?? 0;
      const { stream, size, path } = await files.openDownload(files.resolvePath(request.query.path), offset);
      reply
        .header('content-type', 'application/octet-stream')
        .header('content-disposition', `attachment; filename="${encodeURIComponent(posix.basename(path))}"`);
      // Size 0 is also what /proc and /sys files say: sent chunked, to their end.
      if (size === 0) return reply.send(stream);
      const length = Math.max(0, size - offset);
      return reply.header('content-length', String(length)).send(exactly(stream, length, path));
    },
  );

  r.put(
    '/v1/sessions/:id/files/content',
    onPath(
      'Upload a file (request body streamed, application/octet-stream); creates or truncates it',
      UploadResultSchema,
    ),
    async (request) => {
      const { files, session } = filesOf(scope, request);
      const body = request.body as NodeJS.ReadableStream | undefined;
      if (!body || typeof body.pipe !== 'function')
        throw execError(
          'EXEC_ERR_INVALID_REQUEST',
          'send the file as the request body with content-type application/octet-stream',
        );
      const { bytes } = await files.upload(files.resolvePath(request.query.path), body);
      session.touch();
      return { path: request.query.path, bytesWritten: bytes };
    },
  );
}

/** Metadata and directory listings. */
function listingRoutes(scope: FastifyInstance, r: TypedApi) {
  r.get(
    '/v1/sessions/:id/files/metadata',
    onPath('Metadata of a path (fs/getMetadata)', FileMetadataSchema),
    async (request) => {
      const { files } = filesOf(scope, request);
      return files.getMetadata(files.resolvePath(request.query.path));
    },
  );

  r.get(
    '/v1/sessions/:id/files/list',
    onPath('List a directory (fs/readDirectory)', FsReadDirectoryResult),
    async (request) => {
      const { files } = filesOf(scope, request);
      return { entries: await files.readDirectory(files.resolvePath(request.query.path)) };
    },
  );

  r.get(
    '/v1/sessions/:id/files/canonical',
    onPath('Canonical path (fs/canonicalize)', FsCanonicalizeResult),
    async (request) => {
      const { files } = filesOf(scope, request);
      const path = files.resolvePath(request.query.path);
      return { path: files.clientPath(request.query.path, await files.canonicalize(path)) };
    },
  );
}

/** Changes: remove, copy. */
function changeRoutes(scope: FastifyInstance, r: TypedApi) {
  r.delete(
    '/v1/sessions/:id/files',
    {
      schema: {
        tags: TAGS,
        summary: 'Remove a file or directory (fs/remove)',
        params: SessionParamsSchema,
        querystring: RemoveQuerySchema,
        response: { 200: EmptyResult, ...errors },
      },
    },
    async (request) => {
      const { files } = filesOf(scope, request);
      await files.remove(
        files.resolvePath(request.query.path),
        request.query.recursive === true,
        request.query.force === true,
      );
      return {};
    },
  );

  r.post(
    '/v1/sessions/:id/files/copy',
    {
      schema: {
        tags: TAGS,
        summary: 'Copy a file or (recursive) a directory to a new path (fs/copy)',
        params: SessionParamsSchema,
        body: CopyBodySchema,
        response: { 200: EmptyResult, ...errors },
      },
    },
    async (request) => {
      const { files } = filesOf(scope, request);
      const b = request.body;
      await files.copy(
        files.resolvePath(b.sourcePath, 'sourcePath'),
        files.resolvePath(b.destinationPath, 'destinationPath'),
        b.recursive === true,
      );
      return {};
    },
  );
}

/** A new directory. */
function directoryRoutes(scope: FastifyInstance, r: TypedApi) {
  r.post(
    '/v1/sessions/:id/files/mkdir',
    {
      schema: {
        tags: TAGS,
        summary: 'Create a directory (fs/createDirectory)',
        params: SessionParamsSchema,
        body: MkdirBodySchema,
        response: { 200: EmptyResult, ...errors },
      },
    },
    async (request) => {
      const { files } = filesOf(scope, request);
      await files.createDirectory(files.resolvePath(request.body.path), request.body.recursive === true);
      return {};
    },
  );
}
