/**
 * Files on the wire: the `fs/*` methods (Codex's names, params and answers, plus the marked
 * extensions: chunked writes, `fs/unwatch`) and the bodies of the HTTP file routes.
 */
import { Type, type Static } from 'typebox';
import { Base64Schema, DescribedPathSchema, Opt, Params, PathSchema } from './common.ts';

/** Codex's per-call sandbox object; it can only narrow the session policy. */
const SandboxParam = Opt(Type.Record(Type.String(), Type.Unknown()));
const HandleId = Type.Union([Type.String({ minLength: 1, maxLength: 256 }), Type.Integer({ minimum: 0 })]);
const WatchId = Type.Union([Type.String({ minLength: 1, maxLength: 256 }), Type.Integer()]);
const HandleIdAnswer = Type.Union([Type.String(), Type.Integer()]);

/** `fs/getMetadata`'s answer and `GET .../files/metadata`'s: what a path is, its size and times. */
export const FileMetadataSchema = Type.Object({
  isDirectory: Type.Boolean(),
  isFile: Type.Boolean(),
  isSymlink: Type.Boolean(),
  size: Type.Number(),
  createdAtMs: Type.Number(),
  modifiedAtMs: Type.Number(),
});
export type FileMetadata = Static<typeof FileMetadataSchema>;

/** One entry of `fs/readDirectory` and `GET .../files/list`. */
export const DirectoryEntrySchema = Type.Object({
  fileName: Type.String(),
  isDirectory: Type.Boolean(),
  isFile: Type.Boolean(),
});
export type DirectoryEntry = Static<typeof DirectoryEntrySchema>;

/** Params of the `fs/*` calls that name one path (`readFile`, `getMetadata`, `canonicalize`, `readDirectory`). */
export const FsPathParams = Params({ path: PathSchema, sandbox: SandboxParam });
/** `fs/readFile`'s answer: the whole file, base64. */
export const FsReadFileResult = Type.Object({ dataBase64: Type.String() });
/** `fs/writeFile`: the whole file at once, base64 (chunked writes use `fs/openWrite`). */
export const FsWriteFileParams = Params({ path: PathSchema, dataBase64: Base64Schema, sandbox: SandboxParam });
/** `fs/createDirectory`; `recursive` makes the missing parents too. */
export const FsCreateDirectoryParams = Params({
  path: PathSchema,
  recursive: Opt(Type.Boolean()),
  sandbox: SandboxParam,
});
/** `fs/canonicalize`'s answer: the path with symlinks and `..` resolved. */
export const FsCanonicalizeResult = Type.Object({ path: Type.String() });
/** `fs/readDirectory`'s answer. */
export const FsReadDirectoryResult = Type.Object({ entries: Type.Array(DirectoryEntrySchema) });
/** `fs/remove`; `force` makes a missing path no error. */
export const FsRemoveParams = Params({
  path: PathSchema,
  recursive: Opt(Type.Boolean()),
  force: Opt(Type.Boolean()),
  sandbox: SandboxParam,
});
/** `fs/copy`; a directory needs `recursive`. */
export const FsCopyParams = Params({
  sourcePath: PathSchema,
  destinationPath: PathSchema,
  recursive: Type.Boolean(),
  sandbox: SandboxParam,
});
/** `fs/open` and `fs/openWrite` (extension): a client may choose the handle id. */
export const FsOpenParams = Params({ handleId: Opt(HandleId), path: PathSchema, sandbox: SandboxParam });
/** The handle `fs/open` and `fs/openWrite` answer, for the block calls. */
export const FsHandleResult = Type.Object({ handleId: HandleIdAnswer });
/** `fs/readBlock`: `len` bytes from `offset` of an open handle. */
export const FsReadBlockParams = Params({
  handleId: HandleId,
  offset: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  len: Type.Integer({ minimum: 0 }),
});
/** `fs/readBlock`'s answer: the bytes, base64, and whether the file ended. */
export const FsReadBlockResult = Type.Object({ chunk: Type.String(), eof: Type.Boolean() });
/** `fs/close` and `fs/closeWrite`: the handle to close. */
export const FsHandleParams = Params({ handleId: HandleId });
/** `fs/writeBlock` (extension): the next chunk of a streamed write, base64. */
export const FsWriteBlockParams = Params({ handleId: HandleId, chunk: Base64Schema });
/** `fs/writeBlock`'s and `fs/closeWrite`'s answer: bytes written so far. */
export const FsBytesWrittenResult = Type.Object({ bytesWritten: Type.Integer() });
/** `fs/watchMissing`: paths to report (`fs/missingChanged`) when they appear or go away. */
export const FsWatchMissingParams = Params({
  watchId: WatchId,
  missing: Opt(Type.Array(PathSchema, { maxItems: 1024 })),
  present: Opt(Type.Union([PathSchema, Type.Array(PathSchema, { maxItems: 1024 })])),
});
/** `fs/watchMissing`'s answer. */
export const FsWatchResult = Type.Object({ watching: Type.Literal(true) });
/** `fs/unwatch` (extension): the watch to end. */
export const FsUnwatchParams = Params({ watchId: WatchId });
/** `fs/unwatch`'s answer; `removed` is false for a watch that did not exist. */
export const FsUnwatchResult = Type.Object({ watching: Type.Literal(false), removed: Type.Boolean() });

/** `fs/missingChanged`: a watched path appeared or went away. */
export const FsMissingChangedNotification = Type.Object({ watchId: Type.Union([Type.String(), Type.Integer()]) });

// ---- HTTP: /v1/sessions/:id/files ----

/** The `?path=` of the HTTP file routes that name one path (metadata, list, canonical, upload). */
export const FilePathQuerySchema = Type.Object({ path: DescribedPathSchema });
/** `GET .../files/content`: the file and where to start. */
export const DownloadQuerySchema = Type.Object({
  path: DescribedPathSchema,
  // Bounded like fs/readBlock's: a larger offset reached the read stream and failed there as a 500.
  offset: Type.Optional(
    Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'Start at this byte' }),
  ),
});
/** `GET .../files/content`'s answer in the OpenAPI document: the raw bytes. */
export const DownloadBodySchema = Type.String({
  format: 'binary',
  description: 'The file bytes (application/octet-stream)',
});
/** `PUT .../files/content`'s answer: where the bytes went and how many. */
export const UploadResultSchema = Type.Object({ path: Type.String(), bytesWritten: Type.Number() });
/** `DELETE .../files`: the path, as `fs/remove` takes it. */
export const RemoveQuerySchema = Type.Object({
  path: DescribedPathSchema,
  recursive: Type.Optional(Type.Boolean()),
  force: Type.Optional(Type.Boolean()),
});
/** `POST .../files/copy`, as `fs/copy` takes it. */
export const CopyBodySchema = Type.Object(
  { sourcePath: DescribedPathSchema, destinationPath: DescribedPathSchema, recursive: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
/** `POST .../files/mkdir`, as `fs/createDirectory` takes it. */
export const MkdirBodySchema = Type.Object(
  { path: DescribedPathSchema, recursive: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
