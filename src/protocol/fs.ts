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

export const FileMetadataSchema = Type.Object({
  isDirectory: Type.Boolean(),
  isFile: Type.Boolean(),
  isSymlink: Type.Boolean(),
  size: Type.Number(),
  createdAtMs: Type.Number(),
  modifiedAtMs: Type.Number(),
});
export type FileMetadata = Static<typeof FileMetadataSchema>;

export const DirectoryEntrySchema = Type.Object({
  fileName: Type.String(),
  isDirectory: Type.Boolean(),
  isFile: Type.Boolean(),
});
export type DirectoryEntry = Static<typeof DirectoryEntrySchema>;

export const FsPathParams = Params({ path: PathSchema, sandbox: SandboxParam });
export const FsReadFileResult = Type.Object({ dataBase64: Type.String() });
export const FsWriteFileParams = Params({ path: PathSchema, dataBase64: Base64Schema, sandbox: SandboxParam });
export const FsCreateDirectoryParams = Params({
  path: PathSchema,
  recursive: Opt(Type.Boolean()),
  sandbox: SandboxParam,
});
export const FsCanonicalizeResult = Type.Object({ path: Type.String() });
export const FsReadDirectoryResult = Type.Object({ entries: Type.Array(DirectoryEntrySchema) });
export const FsRemoveParams = Params({
  path: PathSchema,
  recursive: Opt(Type.Boolean()),
  force: Opt(Type.Boolean()),
  sandbox: SandboxParam,
});
export const FsCopyParams = Params({
  sourcePath: PathSchema,
  destinationPath: PathSchema,
  recursive: Type.Boolean(),
  sandbox: SandboxParam,
});
export const FsOpenParams = Params({ handleId: Opt(HandleId), path: PathSchema, sandbox: SandboxParam });
export const FsHandleResult = Type.Object({ handleId: HandleIdAnswer });
export const FsReadBlockParams = Params({
  handleId: HandleId,
  offset: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
  len: Type.Integer({ minimum: 0 }),
});
export const FsReadBlockResult = Type.Object({ chunk: Type.String(), eof: Type.Boolean() });
export const FsHandleParams = Params({ handleId: HandleId });
export const FsWriteBlockParams = Params({ handleId: HandleId, chunk: Base64Schema });
export const FsBytesWrittenResult = Type.Object({ bytesWritten: Type.Integer() });
export const FsWatchMissingParams = Params({
  watchId: WatchId,
  missing: Opt(Type.Array(PathSchema, { maxItems: 1024 })),
  present: Opt(Type.Union([PathSchema, Type.Array(PathSchema, { maxItems: 1024 })])),
});
export const FsWatchResult = Type.Object({ watching: Type.Literal(true) });
export const FsUnwatchParams = Params({ watchId: WatchId });
export const FsUnwatchResult = Type.Object({ watching: Type.Literal(false), removed: Type.Boolean() });

/** `fs/missingChanged`: a watched path appeared or went away. */
export const FsMissingChangedNotification = Type.Object({ watchId: Type.Union([Type.String(), Type.Integer()]) });

// ---- HTTP: /v1/sessions/:id/files ----

export const FilePathQuerySchema = Type.Object({ path: DescribedPathSchema });
export const DownloadQuerySchema = Type.Object({
  path: DescribedPathSchema,
  // Bounded like fs/readBlock's: a larger offset reached the read stream and failed there as a 500.
  offset: Type.Optional(
    Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'Start at this byte' }),
  ),
});
export const DownloadBodySchema = Type.String({
  format: 'binary',
  description: 'The file bytes (application/octet-stream)',
});
export const UploadResultSchema = Type.Object({ path: Type.String(), bytesWritten: Type.Number() });
export const RemoveQuerySchema = Type.Object({
  path: DescribedPathSchema,
  recursive: Type.Optional(Type.Boolean()),
  force: Type.Optional(Type.Boolean()),
});
export const CopyBodySchema = Type.Object(
  { sourcePath: DescribedPathSchema, destinationPath: DescribedPathSchema, recursive: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
export const MkdirBodySchema = Type.Object(
  { path: DescribedPathSchema, recursive: Type.Optional(Type.Boolean()) },
  { additionalProperties: false },
);
