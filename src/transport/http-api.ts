/** REST API under /v1 (filled in by the HTTP API work). */
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.ts';

export async function registerHttpApi(_app: FastifyInstance, _opts: { config: Config }): Promise<void> {}
