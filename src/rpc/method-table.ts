/**
 * A JSON-RPC method table: each method's params schema comes from the protocol module
 * (src/protocol/methods.ts, compiled once here) and its handler is typed by it, params and
 * result alike. Params are validated here, at the edge; handlers trust what they receive.
 */
import type { TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { execError } from '../errors.ts';
import { RPC_METHODS, type MethodName, type MethodParams, type MethodResult } from '../protocol/index.ts';

/** Lifecycle gate: `none` (initialize), `initialized` (everything else). */
export type Requires = 'none' | 'initialized';

export type MethodHandler<M extends MethodName, Ctx> = (
  params: MethodParams<M>,
  ctx: Ctx,
  signal: AbortSignal,
) => Promise<MethodResult<M>> | MethodResult<M>;

export interface CompiledMethod<Ctx> {
  readonly requires: Requires;
  readonly schema: TSchema;
  /** Validates `params` (EXEC_ERR_INVALID_PARAMS naming the field), then runs the handler. */
  run(params: unknown, ctx: Ctx, signal: AbortSignal): Promise<unknown>;
}

/** One validation error, as TypeBox and the HTTP framework's validator (TypeBox's too) report it. */
export interface ValidationError {
  readonly instancePath: string;
  readonly message: string;
  readonly keyword: string;
  readonly params: Record<string, unknown>;
}

/** Our schema patterns, said in words instead of quoting the regular expression. */
const PATTERN_MEANINGS: Record<string, string> = {
  '^(/|file://)[^\\u0000]*$': 'must be an absolute path or a file:// URI, without a NUL byte',
  '^[A-Za-z0-9+/]*={0,2}$': 'must be standard base64',
  '^[^\\u0000]*$': 'must not contain a NUL byte (execve would cut the string there)',
  '^[^\\uD800-\\uDFFF]*$': 'must be well-formed Unicode (an unpaired surrogate has no UTF-8 form)',
};

/**
 * A validator's message with our patterns said in words (the HTTP routes' messages come from
 * the framework's validator: `body/cmd must match pattern "..."`).
 */
export function patternsInWords(message: string): string {
  return message.replace(/must match pattern "([^"]*)"/g, (all, pattern: string) => PATTERN_MEANINGS[pattern] ?? all);
}

/**
 * What `at` must be, when its errors say that a value of the literals' type is none of them
 * (TypeBox reports one "must be equal to constant" per literal of the union): the values. A
 * value of another type keeps its type error ("must be string"), which says more.
 */
function oneOf(errors: readonly ValidationError[], at: string): string | undefined {
  const here = errors.filter((e) => e.instancePath === at);
  const allowed = here.filter((e) => e.keyword === 'const').map((e) => e.params['allowedValue']);
  if (allowed.length === 0) return undefined;
  const types = new Set(here.filter((e) => e.keyword === 'type').map((e) => String(e.params['type'])));
  if (types.has(typeof allowed[0])) return undefined;
  const others = [...types].map((type) => `, or ${type}`).join('');
  return `must be one of ${allowed.map((v) => JSON.stringify(v)).join(', ')}${others}`;
}

/**
 * `errors` with each union of literals said as one "must be one of ..." naming the values, and
 * without the "must match a schema in anyOf" beside it; other errors as they are.
 */
export function readableErrors(errors: readonly ValidationError[]): ValidationError[] {
  const lists = new Map<string, string | undefined>();
  for (const e of errors)
    if (e.keyword === 'const' && !lists.has(e.instancePath)) lists.set(e.instancePath, oneOf(errors, e.instancePath));
  if (![...lists.values()].some((m) => m !== undefined)) return [...errors];
  const said = new Set<string>();
  const out: ValidationError[] = [];
  for (const e of errors) {
    const list = lists.get(e.instancePath);
    if (list === undefined) {
      if (e.keyword !== 'anyOf') out.push(e);
    } else if (!said.has(e.instancePath)) {
      said.add(e.instancePath);
      out.push({ ...e, keyword: 'enum', message: list });
    }
  }
  return out;
}

/**
 * The message of an HTTP request the framework's validator refused (`err.validation`): its own
 * message, unless a union of literals is better said as the values it allows.
 */
export function httpValidationMessage(err: {
  message: string;
  validation?: unknown;
  validationContext?: unknown;
}): string {
  const errors = Array.isArray(err.validation) ? (err.validation as ValidationError[]) : [];
  const readable = readableErrors(errors);
  if (readable.length === errors.length && readable.every((e, i) => e === errors[i]))
    return patternsInWords(err.message);
  const context = typeof err.validationContext === 'string' ? err.validationContext : 'body';
  return patternsInWords(readable.map((e) => `${context}${e.instancePath} ${e.message}`).join(', '));
}

/** Turns TypeBox errors into one message that names the field, e.g. "invalid params: argv: must be array". */
function describe(errors: readonly ValidationError[]): { message: string; field: string } {
  const relevant = readableErrors(errors).filter((e) => e.keyword !== 'boolean' && e.keyword !== 'anyOf');
  const first = relevant.find((e) => e.keyword === 'required') ?? relevant[0] ?? errors[0];
  if (!first) return { message: 'invalid params', field: '' };
  const field = first.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (first.keyword === 'required') {
    const missing = (first.params['requiredProperties'] as string[] | undefined)?.join(', ') ?? '?';
    const at = field ? `${field}.` : '';
    return { message: `invalid params: missing field ${at}${missing}`, field: `${at}${missing}` };
  }
  // A key a keyed map refuses (common.ts `KeyedRecord`): name it, and what its keys must be.
  const extra = first.params['additionalProperties'];
  if (first.keyword === 'additionalProperties' && Array.isArray(extra) && extra.length > 0) {
    const key = JSON.stringify(String(extra[0]));
    const why = /(^|\.)(env|set)$/.test(field)
      ? 'is not an environment variable name (empty, or with = or a NUL byte)'
      : /(^|\.)labels$/.test(field)
        ? 'is not a label name (1-63 of A-Z a-z 0-9 _ . -)'
        : 'is not allowed here';
    return { message: `invalid params: ${field || 'params'}: key ${key} ${why}`, field };
  }
  // The path pattern is ours; say what it means rather than quoting the regular expression.
  const message =
    first.keyword !== 'pattern' ? first.message : (PATTERN_MEANINGS[String(first.params['pattern'])] ?? first.message);
  return { message: `invalid params: ${field || 'params'}: ${message}`, field };
}

export class MethodTable<Ctx> {
  readonly #methods = new Map<string, CompiledMethod<Ctx>>();

  /** Registers `name` with its protocol schema; `requires` defaults to `initialized`. */
  add<M extends MethodName>(name: M, handler: MethodHandler<M, Ctx>, requires: Requires = 'initialized'): this {
    const schema = RPC_METHODS[name].params;
    const compiled = Compile(schema);
    this.#methods.set(name, {
      requires,
      schema,
      async run(params, ctx, signal) {
        if (!compiled.Check(params)) {
          const { message, field } = describe([...compiled.Errors(params)] as unknown as ValidationError[]);
          throw execError('EXEC_ERR_INVALID_PARAMS', message, { detail: { field } });
        }
        // Check() proved the type; TypeScript cannot carry that through the index by `M`.
        return handler(params as MethodParams<M>, ctx, signal);
      },
    });
    return this;
  }

  get(name: string): CompiledMethod<Ctx> | undefined {
    return this.#methods.get(name);
  }

  names(): string[] {
    return [...this.#methods.keys()];
  }
}
