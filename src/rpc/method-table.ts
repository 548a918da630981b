/**
 * A JSON-RPC method table: each method has a TypeBox params schema (compiled once) and a
 * handler. Params are validated here, at the edge; handlers trust what they receive.
 */
import type { Static, TSchema } from 'typebox';
import { Compile } from 'typebox/compile';
import { execError } from '../errors.ts';

export interface MethodDef<S extends TSchema, Ctx, R> {
  readonly schema: S;
  /** Lifecycle gate: `none` (initialize), `initialized` (everything else). */
  readonly requires: 'none' | 'initialized';
  readonly handler: (params: Static<S>, ctx: Ctx, signal: AbortSignal) => Promise<R> | R;
}

interface CompiledMethod<Ctx> {
  readonly requires: 'none' | 'initialized';
  readonly schema: TSchema;
  check(params: unknown): void;
  readonly handler: (params: never, ctx: Ctx, signal: AbortSignal) => unknown;
}

export function defineMethod<S extends TSchema, Ctx, R>(def: MethodDef<S, Ctx, R>): MethodDef<S, Ctx, R> {
  return def;
}

interface ValidationError {
  readonly instancePath: string;
  readonly message: string;
  readonly keyword: string;
  readonly params: Record<string, unknown>;
}

/** Our schema patterns, said in words instead of quoting the regular expression. */
const PATTERN_MEANINGS: Record<string, string> = {
  '^(/|file://)': 'must be an absolute path or a file:// URI',
  '^[A-Za-z0-9+/]*={0,2}$': 'must be standard base64',
};

/** Turns TypeBox errors into one message that names the field, e.g. "invalid params: argv: must be array". */
function describe(errors: readonly ValidationError[]): { message: string; field: string } {
  const relevant = errors.filter((e) => e.keyword !== 'boolean' && e.keyword !== 'anyOf');
  const first = relevant.find((e) => e.keyword === 'required') ?? relevant[0] ?? errors[0];
  if (!first) return { message: 'invalid params', field: '' };
  const field = first.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (first.keyword === 'required') {
    const missing = (first.params['requiredProperties'] as string[] | undefined)?.join(', ') ?? '?';
    const at = field ? `${field}.` : '';
    return { message: `invalid params: missing field ${at}${missing}`, field: `${at}${missing}` };
  }
  // The path pattern is ours; say what it means rather than quoting the regular expression.
  const message = first.keyword !== 'pattern' ? first.message : (PATTERN_MEANINGS[String(first.params['pattern'])] ?? first.message);
  return { message: `invalid params: ${field || 'params'}: ${message}`, field };
}

export class MethodTable<Ctx> {
  readonly #methods = new Map<string, CompiledMethod<Ctx>>();

  add<S extends TSchema, R>(name: string, def: MethodDef<S, Ctx, R>): this {
    const compiled = Compile(def.schema);
    this.#methods.set(name, {
      requires: def.requires,
      schema: def.schema,
      check(params) {
        if (compiled.Check(params)) return;
        const { message, field } = describe([...compiled.Errors(params)] as unknown as ValidationError[]);
        throw execError('EXEC_ERR_INVALID_PARAMS', message, { detail: { field } });
      },
      handler: def.handler as (params: never, ctx: Ctx, signal: AbortSignal) => unknown,
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
