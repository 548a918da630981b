/**
 * The wire protocol, defined once: every JSON-RPC method, notification and HTTP body as a
 * TypeBox schema, with the static types derived from it. The server validates with these
 * schemas, the OpenAPI document is generated from them and the client SDK is typed by them.
 */
export * from './binary-output.ts';
export * from './common.ts';
export * from './fs.ts';
export * from './mcp.ts';
export * from './methods.ts';
export * from './preview.ts';
export * from './process.ts';
export * from './session.ts';
export * from './tools.ts';
export * from './tokens.ts';
