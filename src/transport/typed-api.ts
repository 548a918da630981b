/** The Fastify instance as the routes see it: TypeBox schemas type each route's request and reply. */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type {
  FastifyBaseLogger,
  FastifyInstance,
  FastifyRequest,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';

/** `scope.withTypeProvider<TypeBoxTypeProvider>()`, named, so routes can be registered by several functions. */
export type TypedApi = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** `preValidation` of a route whose JSON body may be left out: no body validates as `{}`. */
export async function bodyOptional(request: FastifyRequest): Promise<void> {
  if (request.body === undefined || request.body === null) request.body = {};
}
