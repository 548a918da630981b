/**
 * The JSON-RPC protocol in one table: every method's params and result schema, the
 * notifications the server sends and the request it makes of its client (docs/protocol.md).
 * The server's method table validates params with these schemas; the SDK's typed `request`
 * and the static types below are derived from the same objects.
 */
import { Type, type Static, type TSchema } from 'typebox';
import { EmptyResult, NoParams, Opt, Params } from './common.ts';
import * as fs from './fs.ts';
import * as preview from './preview.ts';
import * as proc from './process.ts';
import {
  ApprovalAnswerSchema,
  ApprovalRequestSchema,
  ForkAnswerSchema,
  ForkBodySchema,
  HibernationAnswerSchema,
  ImagePullSchema,
  DrainingNotificationSchema,
  SessionInfoSchema,
  SessionSpecSchema,
  SnapshotInfoSchema,
  SnapshotNameSchema,
} from './session.ts';

const FileUri = Type.String({ description: 'A file:// URI' });

/** What Codex reads from `initialize.environmentInfo` (and `environment/info`). */
export const EnvironmentInfoSchema = Type.Object({
  shell: Type.Object({ name: Type.String(), path: Type.String() }),
  executorVersion: Type.String(),
  providerId: Type.String(),
  cwd: FileUri,
  userHomeDir: FileUri,
  platformOs: Type.String(),
  prependPathDirs: Type.Array(Type.String()),
  temporaryDirectories: Type.Array(Type.String()),
  tempDir: FileUri,
  /** Codex's capability flags; only what this server really implements is true. */
  capabilities: Type.Record(Type.String(), Type.Boolean()),
});
export type EnvironmentInfo = Static<typeof EnvironmentInfoSchema>;

/** `observe`: follow an existing session (the console) without evicting its client or pausing its commands. */
export const InitializeParams = Params({
  clientName: Type.String({ maxLength: 256 }),
  resumeSessionId: Opt(Type.String({ minLength: 1, maxLength: 128 })),
  session: Opt(SessionSpecSchema),
  observe: Opt(Type.Boolean()),
  /** Our extension: `process/output` as binary frames (binary-output.ts). */
  binaryOutput: Opt(Type.Boolean()),
});
/** `initialize`'s answer: the session now attached, the extensions this server has, its environment. */
export const InitializeResult = Type.Object({
  sessionId: Type.String(),
  /** Our extensions (`processResize`, `approvals`, `snapshots`...). */
  capabilities: Type.Record(Type.String(), Type.Boolean()),
  environmentInfo: EnvironmentInfoSchema,
});
export type InitializeResult = Static<typeof InitializeResult>;

const ConfigLayers = Type.Object({ layers: Type.Array(Type.Unknown()), cloudInsertionIndex: Type.Integer() });

/** Every JSON-RPC method a client may call: its params and its result. */
export const RPC_METHODS = {
  initialize: { params: InitializeParams, result: InitializeResult },
  'environment/info': { params: NoParams, result: EnvironmentInfoSchema },
  'environmentConfig/read': {
    params: Params({
      cwd: Opt(Type.String()),
      configPaths: Opt(Type.Array(Type.Array(Type.String()))),
      requirementsPaths: Opt(Type.Array(Type.Array(Type.String()))),
    }),
    result: Type.Object({
      userHomeDir: FileUri,
      codexHomeDir: FileUri,
      hostname: Type.String(),
      config: ConfigLayers,
      requirements: ConfigLayers,
    }),
  },
  'session/info': { params: NoParams, result: SessionInfoSchema },
  'session/terminateAll': { params: NoParams, result: Type.Object({ terminated: Type.Integer() }) },
  'session/snapshot': {
    params: Params({ name: Opt(SnapshotNameSchema), memory: Opt(Type.Boolean()) }),
    result: SnapshotInfoSchema,
  },
  'session/fork': { params: Params(ForkBodySchema.properties), result: ForkAnswerSchema },
  'session/hibernate': { params: NoParams, result: HibernationAnswerSchema },
  'session/wake': { params: NoParams, result: HibernationAnswerSchema },
  'session/exposePort': { params: preview.ExposePortParams, result: preview.PreviewSchema },
  'session/closePort': { params: preview.ClosePortParams, result: preview.ClosePortResult },

  'process/start': { params: proc.ProcessStartParams, result: proc.ProcessStartResult },
  'process/read': { params: proc.ProcessReadParams, result: proc.ProcessReadResult },
  'process/write': { params: proc.ProcessWriteParams, result: proc.ProcessWriteResult },
  'process/signal': { params: proc.ProcessSignalParams, result: EmptyResult },
  'process/terminate': { params: proc.ProcessIdParams, result: proc.ProcessTerminateResult },
  'process/resize': { params: proc.ProcessResizeParams, result: EmptyResult },
  'process/closeStdin': { params: proc.ProcessIdParams, result: EmptyResult },
  'process/list': { params: NoParams, result: proc.ProcessListResult },

  'fs/readFile': { params: fs.FsPathParams, result: fs.FsReadFileResult },
  'fs/writeFile': { params: fs.FsWriteFileParams, result: EmptyResult },
  'fs/createDirectory': { params: fs.FsCreateDirectoryParams, result: EmptyResult },
  'fs/getMetadata': { params: fs.FsPathParams, result: fs.FileMetadataSchema },
  'fs/canonicalize': { params: fs.FsPathParams, result: fs.FsCanonicalizeResult },
  'fs/readDirectory': { params: fs.FsPathParams, result: fs.FsReadDirectoryResult },
  'fs/remove': { params: fs.FsRemoveParams, result: EmptyResult },
  'fs/copy': { params: fs.FsCopyParams, result: EmptyResult },
  'fs/open': { params: fs.FsOpenParams, result: fs.FsHandleResult },
  'fs/readBlock': { params: fs.FsReadBlockParams, result: fs.FsReadBlockResult },
  'fs/close': { params: fs.FsHandleParams, result: EmptyResult },
  'fs/openWrite': { params: fs.FsOpenParams, result: fs.FsHandleResult },
  'fs/writeBlock': { params: fs.FsWriteBlockParams, result: fs.FsBytesWrittenResult },
  'fs/closeWrite': { params: fs.FsHandleParams, result: fs.FsBytesWrittenResult },
  'fs/watchMissing': { params: fs.FsWatchMissingParams, result: fs.FsWatchResult },
  'fs/unwatch': { params: fs.FsUnwatchParams, result: fs.FsUnwatchResult },
} as const satisfies Record<string, { readonly params: TSchema; readonly result: TSchema }>;

export type MethodName = keyof typeof RPC_METHODS;
export type MethodParams<M extends MethodName> = Static<(typeof RPC_METHODS)[M]['params']>;
export type MethodResult<M extends MethodName> = Static<(typeof RPC_METHODS)[M]['result']>;

/** Notifications the server sends, by method. */
export const RPC_NOTIFICATIONS = {
  'process/output': proc.ProcessOutputNotification,
  'process/exited': proc.ProcessExitedNotification,
  'process/closed': proc.ProcessClosedNotification,
  'process/escalated': proc.ProcessEscalatedNotification,
  'fs/missingChanged': fs.FsMissingChangedNotification,
  'session/imagePull': ImagePullSchema,
  'server/draining': DrainingNotificationSchema,
} as const satisfies Record<string, TSchema>;

export type NotificationName = keyof typeof RPC_NOTIFICATIONS;
export type NotificationParams<N extends NotificationName> = Static<(typeof RPC_NOTIFICATIONS)[N]>;

/** Every notification method the server sends (the keys of `RPC_NOTIFICATIONS`). */
export const NOTIFICATION_NAMES = Object.keys(RPC_NOTIFICATIONS) as NotificationName[];

/**
 * One server notification as a union discriminated by `method`: a `switch (n.method)` narrows
 * `n.params` to that notification's params.
 */
export type ServerNotification = {
  [N in NotificationName]: { readonly method: N; readonly params: NotificationParams<N> };
}[NotificationName];

/** The notifications about one process (`process/*`): each carries its `processId` and `seq`. */
export type ProcessNotification = Extract<ServerNotification, { method: `process/${string}` }>;

/** Whether `method` is a notification of this protocol (a newer server may send others). */
export function isNotificationName(method: string): method is NotificationName {
  return Object.hasOwn(RPC_NOTIFICATIONS, method);
}

/** Requests the server makes of its client. */
export const RPC_SERVER_REQUESTS = {
  'approval/request': { params: ApprovalRequestSchema, result: ApprovalAnswerSchema },
} as const satisfies Record<string, { readonly params: TSchema; readonly result: TSchema }>;
