/**
 * `process/*` on the wire: Codex's method names and fields plus the marked extensions
 * (docs/protocol.md, "Processes"), their answers, and the notifications a session streams.
 */
import { Type, type Static } from 'typebox';
import {
  Base64Schema,
  EnvNameSchema,
  ExecStringSchema,
  KeyedRecord,
  literals,
  MAX_ENV_VARS,
  OneOf,
  Opt,
  Params,
  PathSchema,
  ProcessIdSchema,
  SIGNAL_NAMES,
  StreamNameSchema,
} from './common.ts';

const EnvMap = KeyedRecord(EnvNameSchema(4096), ExecStringSchema(131072), MAX_ENV_VARS);
const Size = Type.Object({
  cols: Type.Integer({ minimum: 1, maximum: 1000 }),
  rows: Type.Integer({ minimum: 1, maximum: 1000 }),
});

/** `process/start`: Codex's fields plus the marked extensions (docs/protocol.md, "Processes"). */
export const ProcessStartParams = Params({
  processId: ProcessIdSchema,
  argv: Type.Array(ExecStringSchema(131072), { maxItems: 4096 }),
  cwd: Opt(PathSchema),
  env: Opt(EnvMap),
  envPolicy: Opt(
    Type.Object({
      inherit: Opt(OneOf(['all', 'core', 'none'])),
      ignoreDefaultExcludes: Opt(Type.Boolean()),
      exclude: Opt(Type.Array(Type.String({ maxLength: 1024 }), { maxItems: 1024 })),
      set: Opt(EnvMap),
      includeOnly: Opt(Type.Array(Type.String({ maxLength: 1024 }), { maxItems: 1024 })),
    }),
  ),
  tty: Opt(Type.Boolean()),
  pipeStdin: Opt(Type.Boolean()),
  arg0: Opt(ExecStringSchema(4096)),
  sandbox: Opt(Type.Record(Type.String(), Type.Unknown())),
  metadata: Opt(Type.Unknown()),
  size: Opt(Size),
  timeoutMs: Opt(Type.Integer({ minimum: 1, maximum: 7 * 86_400_000 })),
  sandboxPermissions: Opt(OneOf(['use-default', 'require-escalated'])),
  approval: Opt(OneOf(['approved', 'approved-for-session'])),
});
export type ProcessStartParams = Static<typeof ProcessStartParams>;

/**
 * Codex parses `sandboxType` as its own enum (none | linuxSeccomp | macosSeatbelt...): both of
 * our Linux sandboxes answer `linuxSeccomp` there; `sandbox` names the mechanism.
 */
export const ProcessStartResult = Type.Object({
  processId: Type.String(),
  sandboxType: OneOf(['none', 'linuxSeccomp']),
  sandbox: Type.String(),
});

/** `process/read`: output after `afterSeq`, waiting up to `waitMs` for some (a long poll). */
export const ProcessReadParams = Params({
  processId: ProcessIdSchema,
  afterSeq: Opt(Type.Integer({ minimum: 0 })),
  maxBytes: Opt(Type.Integer({ minimum: 1 })),
  waitMs: Opt(Type.Integer({ minimum: 0 })),
});

/** How a process ended, as every answer and notification names it. */
export const TerminalStatusSchema = OneOf(['exited', 'signaled', 'timed-out', 'terminated', 'lost']);

/** One chunk of retained output, numbered by its `seq` (`chunk` is base64). */
export const OutputChunkSchema = Type.Object({ seq: Type.Integer(), stream: StreamNameSchema, chunk: Type.String() });

/** `process/read`'s answer: the chunks, where to read on, and how the process ended if it did. */
export const ProcessReadResult = Type.Object({
  chunks: Type.Array(OutputChunkSchema),
  nextSeq: Type.Integer(),
  exited: Type.Boolean(),
  exitCode: Type.Union([Type.Integer(), Type.Null()]),
  closed: Type.Boolean(),
  failure: Type.Union([Type.String(), Type.Null()]),
  sandboxDenied: Type.Boolean(),
  terminal: Type.Union([TerminalStatusSchema, Type.Null()]),
  signal: Type.Union([Type.String(), Type.Null()]),
  firstRetainedSeq: Type.Integer(),
  droppedBytes: Type.Integer(),
});
export type ProcessReadResult = Static<typeof ProcessReadResult>;

/** `process/write`: stdin bytes, base64; a repeated `writeId` is accepted without writing again. */
export const ProcessWriteParams = Params({
  processId: ProcessIdSchema,
  chunk: Base64Schema,
  writeId: Opt(Type.String({ maxLength: 256 })),
});
/** What became of a `process/write` (not an error: the client decides what a closed stdin means). */
export const WriteStatusSchema = OneOf(['accepted', 'unknownProcess', 'stdinClosed', 'starting']);
export type WriteStatus = Static<typeof WriteStatusSchema>;
/** `process/write`'s answer. */
export const ProcessWriteResult = Type.Object({ status: WriteStatusSchema });

/** `process/signal`: a signal by name (`interrupt` is Codex's Ctrl-C). */
export const ProcessSignalParams = Params({
  processId: ProcessIdSchema,
  signal: Type.Union([Type.Literal('interrupt'), ...literals(SIGNAL_NAMES)]),
});
/** Params of the calls that name only a process (`process/terminate`, `process/closeStdin`). */
export const ProcessIdParams = Params({ processId: ProcessIdSchema });
/** `process/terminate`'s answer: false for a process unknown or already ended. */
export const ProcessTerminateResult = Type.Object({ running: Type.Boolean() });
/** `process/resize`: a PTY process's new terminal size. */
export const ProcessResizeParams = Params({
  processId: ProcessIdSchema,
  cols: Type.Integer({ minimum: 1, maximum: 1000 }),
  rows: Type.Integer({ minimum: 1, maximum: 1000 }),
});

/** One process as `process/list` (and the console) shows it. */
export const ProcessSummarySchema = Type.Object({
  processId: Type.String(),
  argv: Type.Array(Type.String()),
  mode: OneOf(['pty', 'pipe', 'pipe-no-stdin']),
  status: Type.Union([Type.Literal('starting'), Type.Literal('running'), TerminalStatusSchema]),
  exitCode: Type.Union([Type.Integer(), Type.Null()]),
  sandboxType: Type.String(),
  nextSeq: Type.Integer(),
  createdAtMs: Type.Number(),
  /** When it ended; null while it runs. */
  endedAtMs: Type.Union([Type.Number(), Type.Null()]),
  sandboxDenied: Type.Boolean(),
});
export type ProcessSummary = Static<typeof ProcessSummarySchema>;
/** `process/list`'s answer: the session's processes, running and ended. */
export const ProcessListResult = Type.Object({ processes: Type.Array(ProcessSummarySchema) });

// ---- notifications (server to client) ----

/** `process/output`: output as it comes, in `seq` order (base64, or a binary frame if asked for). */
export const ProcessOutputNotification = Type.Object({
  processId: Type.String(),
  seq: Type.Integer(),
  stream: StreamNameSchema,
  chunk: Type.String(),
});
/** `process/exited`: how the process ended; `process/closed` follows once its output is done. */
export const ProcessExitedNotification = Type.Object({
  processId: Type.String(),
  seq: Type.Integer(),
  exitCode: Type.Integer(),
  terminal: TerminalStatusSchema,
  signal: Type.Optional(Type.String()),
  sandboxDenied: Type.Boolean(),
});
/** `process/closed`: always last; both streams ended and the exit is known. */
export const ProcessClosedNotification = Type.Object({ processId: Type.String(), seq: Type.Integer() });
/** `process/escalated`: a denied sandboxed attempt is run again without the sandbox. */
export const ProcessEscalatedNotification = Type.Object({
  processId: Type.String(),
  seq: Type.Integer(),
  reason: Type.String(),
});
