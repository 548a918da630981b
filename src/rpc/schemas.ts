/** TypeBox building blocks shared by the JSON-RPC method schemas. */
import { Type, type TSchema } from 'typebox';

/** Optional and nullable: Codex sends `null` for absent optionals (`arg0: null`, `maxBytes: null`). */
export function Opt<T extends TSchema>(schema: T) {
  return Type.Optional(Type.Union([schema, Type.Null()]));
}

export const ProcessIdSchema = Type.String({ minLength: 1, maxLength: 256 });
export { PathSchema } from '../sessions/session-spec.ts';
export const Base64Schema = Type.String({ maxLength: 128 * 1024 * 1024, pattern: '^[A-Za-z0-9+/]*={0,2}$' });

/** Params objects accept unknown fields (newer clients send more than we know) but must be objects. */
export function Params<T extends Record<string, TSchema>>(properties: T) {
  return Type.Object(properties);
}
