/**
 * One definition per wire type: the SDK's types are the protocol module's static types, and
 * the server validates, answers and documents with the very same schema objects.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Static } from 'typebox';
import * as sdk from '../../src/index.ts';
import * as protocol from '../../src/protocol/index.ts';
import type { Connection } from '../../src/rpc/connection.ts';
import { MethodTable } from '../../src/rpc/method-table.ts';
import { registerFsMethods } from '../../src/rpc/methods/fs-methods.ts';
import { registerProcessMethods } from '../../src/rpc/methods/process-methods.ts';
import { registerSessionMethods } from '../../src/rpc/methods/session-methods.ts';
import { loadConfig } from '../../src/config.ts';
import { registerPreviewMethods } from '../../src/preview/rpc-methods.ts';
import { PreviewSigner } from '../../src/preview/signing.ts';
import { startServer } from '../support/harness.ts';

/** True only when A and B are the same type (checked by `tsc --noEmit`, which `npm test` runs first). */
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

const sameTypes: [
  Same<sdk.SessionInfo, Static<typeof protocol.SessionInfoSchema>>,
  Same<sdk.SessionSpec, Static<typeof protocol.SessionSpecSchema>>,
  Same<sdk.SnapshotInfo, Static<typeof protocol.SnapshotInfoSchema>>,
  Same<sdk.ApprovalRequest, Static<typeof protocol.ApprovalRequestSchema>>,
  Same<sdk.ApprovalDecision, Static<typeof protocol.ApprovalDecisionSchema>>,
  Same<sdk.ProcessSummary, Static<typeof protocol.ProcessSummarySchema>>,
  Same<sdk.files.FileMetadata, Static<typeof protocol.FileMetadataSchema>>,
  Same<sdk.files.DirectoryEntry, Static<typeof protocol.DirectoryEntrySchema>>,
  Same<sdk.StreamName, Static<typeof protocol.StreamNameSchema>>,
  Same<sdk.MethodResult<'process/read'>, Static<typeof protocol.ProcessReadResult>>,
  Same<Awaited<ReturnType<sdk.ExecServerClient['sessionInfo']>>, Static<typeof protocol.SessionInfoSchema>>,
  Same<Awaited<ReturnType<sdk.HttpApi['listSnapshots']>>, Static<typeof protocol.SnapshotInfoSchema>[]>,
] = [true, true, true, true, true, true, true, true, true, true, true, true];

test('the SDK exports the protocol module itself, not copies of its schemas', () => {
  assert.ok(sameTypes.every((t) => t === true));
  assert.equal(sdk.protocol.SessionInfoSchema, protocol.SessionInfoSchema);
  assert.equal(sdk.protocol.RPC_METHODS, protocol.RPC_METHODS);
});

test("the server's method table validates with the protocol's params schemas (the same objects)", () => {
  const table = new MethodTable<Connection>();
  registerSessionMethods(table);
  registerProcessMethods(table);
  registerFsMethods(table);
  registerPreviewMethods(table, { config: loadConfig([], {}), signer: new PreviewSigner(undefined) });
  assert.deepEqual(table.names().sort(), Object.keys(protocol.RPC_METHODS).sort());
  for (const [name, def] of Object.entries(protocol.RPC_METHODS))
    assert.equal(table.get(name)?.schema, def.params, name);
});

test('the OpenAPI document describes the HTTP bodies with the protocol schemas', async (t) => {
  const server = await startServer();
  t.after(() => server.close());
  const doc = (await (await fetch(`${server.httpUrl}/docs/openapi.json`)).json()) as {
    paths: Record<
      string,
      Record<
        string,
        {
          responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
          requestBody?: { content: Record<string, { schema: unknown }> };
        }
      >
    >;
  };
  // @fastify/swagger writes OpenAPI 3.0: `const: x` becomes `enum: [x]`, `patternProperties`
  // `additionalProperties`, and `anyOf: [X, null]` X with `nullable: true`.
  const to30 = (_key: string, v: unknown): unknown => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
    const { anyOf, ...others } = v as { anyOf?: Array<Record<string, unknown>> };
    if (anyOf?.length === 2 && anyOf[1]?.['type'] === 'null') return { ...anyOf[0], ...others, nullable: true };
    const { const: c, patternProperties: p, ...rest } = v as Record<string, unknown>;
    const values = p === undefined ? [] : Object.values(p as Record<string, unknown>);
    return {
      ...(c !== undefined ? { enum: [c] } : {}),
      ...rest,
      ...(values[0] !== undefined ? { additionalProperties: values[0] } : {}),
    };
  };
  const json = (s: unknown): unknown => JSON.parse(JSON.stringify(s), to30);
  const openapi = (s: unknown): unknown => JSON.parse(JSON.stringify(s));
  const answer = (path: string, method: string, status: string): unknown =>
    openapi(doc.paths[path]?.[method]?.responses[status]?.content?.['application/json']?.schema);
  assert.deepEqual(answer('/v1/sessions/{id}', 'get', '200'), json(protocol.SessionInfoSchema));
  assert.deepEqual(answer('/v1/snapshots', 'get', '200'), json(protocol.SnapshotListSchema));
  assert.deepEqual(answer('/v1/sessions/{id}/exec_command', 'post', '200'), json(protocol.ExecResultSchema));
  assert.deepEqual(answer('/v1/sessions/{id}/files/metadata', 'get', '200'), json(protocol.FileMetadataSchema));
  assert.deepEqual(
    openapi(doc.paths['/v1/sessions']?.['post']?.requestBody?.content['application/json']?.schema),
    json(protocol.SessionSpecSchema),
  );
});
