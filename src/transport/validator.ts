/**
 * The validator compiler of every route of ours: `@fastify/type-provider-typebox`'s, with one
 * check added. The library converts a query, its headers and path parameters before it checks
 * them (`Value.Convert`), and the conversion reads "1.5" and "true" as 1 and "0x2" as 2: a batch
 * of another size than asked (`?count=`), a download from another offset. So where such a part
 * declares an integer, its text must be one, written in decimal digits.
 */
import { TypeBoxValidatorCompiler } from '@fastify/type-provider-typebox';
import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify';
import type { TSchema } from 'typebox';

const WHOLE = /^[0-9]+$/;

/** The integer-typed properties of a part's object schema (none for a body: JSON keeps types). */
function integerFields(schema: TSchema, httpPart: string | undefined): string[] {
  if (httpPart === 'body') return [];
  const properties = (schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {};
  return Object.entries(properties)
    .filter(([, s]) => s.type === 'integer')
    .map(([key]) => key);
}

/** TypeBox validation, integers in a query, header or path written as whole numbers first. */
export const validatorCompiler: FastifySchemaCompiler<TSchema> = (route) => {
  const check = TypeBoxValidatorCompiler(route);
  const integers = integerFields(route.schema, route.httpPart);
  if (integers.length === 0) return check;
  return (value) => {
    for (const key of integers) {
      const raw = (value as Record<string, unknown> | null)?.[key];
      if (typeof raw === 'string' && !WHOLE.test(raw)) {
        const error: FastifySchemaValidationError = {
          keyword: 'type',
          instancePath: `/${key}`,
          schemaPath: `#/properties/${key}/type`,
          params: { type: 'integer' },
          message: 'must be a whole number, written in decimal digits',
        };
        return { error: [error] };
      }
    }
    return check(value);
  };
};
