/**
 * TypeBox building blocks shared by every wire schema of the protocol (docs/protocol.md):
 * JSON-RPC params objects, paths, ids, base64 and the HTTP error body.
 */
import {
  Type,
  type Static,
  type TLiteral,
  type TSchema,
  type TSchemaOptions,
  type TString,
  type TUnion,
} from 'typebox';
import { ERROR_STATUSES, execError, type ErrorStatus } from '../errors.ts';

/** Optional and nullable: Codex sends `null` for absent optionals (`arg0: null`, `maxBytes: null`). */
export function Opt<T extends TSchema>(schema: T) {
  return Type.Optional(Type.Union([schema, Type.Null()]));
}

/** Params objects accept unknown fields (newer clients send more than we know) but must be objects. */
export function Params<T extends Record<string, TSchema>>(properties: T) {
  return Type.Object(properties);
}

/** Params of a method that takes none: an object (extra fields ignored) or `null`. */
export const NoParams = Type.Union([Params({}), Type.Null()]);

/** The answer of a method that reports nothing but success. */
export const EmptyResult = Type.Object({});

const PATH = { minLength: 1, maxLength: 4096, pattern: '^(/|file://)[^\\u0000]*$' } as const;

/** The pattern of a string with no NUL byte (method-table.ts says it in words). */
export const NO_NUL = { pattern: '^[^\\u0000]*$' } as const;

/**
 * A string that goes to execve(2) as it is (an argument, an environment value): a NUL byte would
 * end it there, and the command would get less than was sent, so it is refused instead.
 */
export const ExecStringSchema = (maxLength: number): TString =>
  Type.String({ maxLength, ...NO_NUL, description: 'no NUL byte' });

/** An environment variable's name: `=` would end the name early, a NUL the whole entry. */
export const EnvNameSchema = (maxLength: number): TString =>
  Type.String({ minLength: 1, maxLength, pattern: '^[^=\\u0000]+$', description: 'no = and no NUL byte' });

/**
 * Environment variables one map may carry: far above what a program's environment holds, and
 * what keeps a session's stored spec bounded by more than the message size.
 */
export const MAX_ENV_VARS = 4096;

/**
 * A map whose keys must match `key`, with at most `maxProperties` of them. TypeBox's `Record` with a patterned key alone only
 * constrains the keys that match (JSON Schema `patternProperties`) and lets any other key
 * through: an environment name with `=` or a label name with spaces was accepted as it was.
 */
export const KeyedRecord = <V extends TSchema>(key: TString, value: V, maxProperties: number) =>
  Type.Record(key, value, { additionalProperties: false, maxProperties });

/** An absolute path or a `file://` URI (the form every path on the wire may take). */
export const PathSchema = Type.String(PATH);

/**
 * Strips a `file://` prefix; paths on the wire may be either form. A URI that does not parse
 * (`file://[::1/x`), or whose percent-encoding does not decode (`file:///%ZZ`), is invalid params
 * naming the value, like every other bad path, so each caller answers 400 / -32602 instead of an
 * internal error.
 */
export function toPath(value: string): string {
  return parsePath(value, undefined);
}

/** `toPath` for the value of `field`: the error's message and `data.field` name it. */
export function toFieldPath(value: string, field: string): string {
  return parsePath(value, field);
}

function parsePath(value: string, field: string | undefined): string {
  const invalid = (why: string) =>
    execError('EXEC_ERR_INVALID_PARAMS', `${field === undefined ? '' : `${field}: `}${why}`, {
      ...(field === undefined ? {} : { detail: { field } }),
    });
  let path = value;
  if (value.startsWith('file://')) {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw invalid(`${JSON.stringify(value)} is not a valid file URI`);
    }
    if (url.host !== '' && url.host !== 'localhost')
      throw invalid(`file URI ${value} names a host; only local paths are supported`);
    try {
      path = decodeURIComponent(url.pathname);
    } catch {
      throw invalid(`${JSON.stringify(value)} is not a valid file URI (malformed percent-encoding)`);
    }
  }
  // No system call takes such a path: the engine would cut it short, or an exec fail obscurely.
  if (path.includes('\0'))
    throw invalid(`${field === undefined ? 'path ' : ''}${JSON.stringify(value)} contains a NUL byte`);
  return path;
}

/** The same, described for the OpenAPI document of the HTTP file routes. */
export const DescribedPathSchema = Type.String({
  ...PATH,
  description: 'Absolute path or file:// URI inside the session',
});

/**
 * An image reference as the engine's grammar has it (`[registry[:port]/]name[:tag][@digest]`,
 * lower-case name components) or an image id (`sha256:HEX`). Checked before any engine call:
 * the engine answers a path like `../../x` with a redirect that its client then follows to
 * another host (docs/docker-backend.md).
 */
export const IMAGE_REF_PATTERN =
  '^(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\\.(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?))*(?::[0-9]{1,5})?/)?' +
  '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*' +
  '(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$';
const IMAGE_REF = new RegExp(IMAGE_REF_PATTERN);

/** Whether `ref` is an image reference or id the engine can be asked about (IMAGE_REF_PATTERN). */
export function isImageRef(ref: string): boolean {
  return ref.length <= 512 && IMAGE_REF.test(ref);
}

/** An image reference or id as the engine takes it (IMAGE_REF_PATTERN), checked before the engine sees it. */
export const ImageRefSchema = Type.String({ minLength: 1, maxLength: 512, pattern: IMAGE_REF_PATTERN });

/**
 * A process id. Binary output frames name it in UTF-8 (binary-output.ts), which has no form for
 * an unpaired surrogate (`"\ud800"` would arrive as U+FFFD): the output of such an id would name
 * another process, so it is refused.
 */
export const ProcessIdSchema = Type.String({ minLength: 1, maxLength: 256, pattern: '^[^\\uD800-\\uDFFF]*$' });
/** Bytes carried as base64 in JSON (at most 128 MiB of text). */
export const Base64Schema = Type.String({ maxLength: 128 * 1024 * 1024, pattern: '^[A-Za-z0-9+/]*={0,2}$' });

type Literals<T extends readonly string[]> = { -readonly [K in keyof T]: TLiteral<T[K]> };

/** Literal schemas of `values`, one each, keeping each literal's type (a plain `map` widens them). */
export function literals<const T extends readonly string[]>(values: T): Literals<T> {
  return values.map((v) => Type.Literal(v)) as Literals<T>;
}

/** A string that is one of `values` (a union of their literal schemas). */
export function OneOf<const T extends readonly string[]>(values: T, options?: TSchemaOptions): TUnion<Literals<T>> {
  return Type.Union(literals(values), options) as TUnion<Literals<T>>;
}

export { SIGNAL_NAMES, type SignalName } from './signals.ts';

/** Output stream label; a PTY merges both streams into `pty`. */
export const StreamNameSchema = OneOf(['stdout', 'stderr', 'pty']);
export type StreamName = Static<typeof StreamNameSchema>;

/** Every HTTP error answer (the JSON-RPC form is `error.data.code`). */
export const ErrorSchema = Type.Object(
  {
    code: Type.String({ description: 'Stable EXEC_ERR_* code' }),
    message: Type.String(),
    call_id: Type.Optional(Type.String()),
  },
  { description: 'Every error answer: a stable code and a readable message' },
);
export type ErrorBody = Static<typeof ErrorSchema>;

/** The error answers of a route for OpenAPI: every status of the error registry, each with the ErrorSchema body. */
export const ERROR_RESPONSES = Object.fromEntries(ERROR_STATUSES.map((status) => [status, ErrorSchema])) as Record<
  ErrorStatus,
  typeof ErrorSchema
>;
