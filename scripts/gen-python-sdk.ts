/**
 * Writes clients/python/exec_server/_generated.py from the server's own definitions: the error
 * registry (src/errors.ts), the signal names, the tool facade's argument schemas and the wire
 * types of the answers and notifications the SDK hands to its users (src/protocol/, as
 * `TypedDict`s), so the Python SDK cannot drift from them. `--check` compares instead of
 * writing and exits 1 on a difference (the Python suite runs it; test/unit/gen-python-sdk.test.ts
 * compares `render()` with the file).
 *
 *   node --import tsx scripts/gen-python-sdk.ts [--check]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TSchema } from 'typebox';
import { ERROR_REGISTRY, RETRYABLE_CODES } from '../src/errors.ts';
import {
  ApprovalDecisionSchema,
  ApprovalPolicySchema,
  ApprovalPurposeSchema,
  ApprovalRequestSchema,
  ApprovalRequiredSchema,
  ApprovalSchema,
  DirectoryEntrySchema,
  EgressInfoSchema,
  EnvironmentInfoSchema,
  ExecCommandBodySchema,
  ExecResultSchema,
  ExposedPortSchema,
  FileMetadataSchema,
  FunctionCallOutputSchema,
  HibernationAnswerSchema,
  HibernationStateSchema,
  ImagePullSchema,
  InitializeResult,
  MAX_SESSION_BATCH,
  PreviewSchema,
  ProcessSummarySchema,
  ResourceUsageSchema,
  SandboxPolicySchema,
  SessionInfoSchema,
  SessionTokenSchema,
  SIGNAL_NAMES,
  SnapshotInfoSchema,
  StreamNameSchema,
  TerminalStatusSchema,
  TokenAccessSchema,
  UploadResultSchema,
  WriteStdinBodySchema,
} from '../src/protocol/index.ts';

const TARGET = new URL('../clients/python/exec_server/_generated.py', import.meta.url);

/** A TypeBox schema as plain JSON Schema, an optional-or-null field as its schema alone. */
function plain(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(plain);
  if (typeof schema !== 'object' || schema === null) return schema;
  const s = schema as Record<string, unknown>;
  const anyOf = s['anyOf'];
  if (Array.isArray(anyOf) && anyOf.length === 2 && (anyOf[1] as { type?: unknown }).type === 'null')
    return plain(anyOf[0]);
  return Object.fromEntries(Object.entries(s).map(([k, v]) => [k, plain(v)]));
}

/** The model-facing definitions of the facade's two tools (OpenAI function-tool shape). */
const TOOLS = [
  {
    type: 'function',
    name: 'exec_command',
    description:
      'Runs a shell command in the session. Waits up to yield_time_ms for it to finish; a command still running answers a session_id to pass to write_stdin. Output is middle-truncated to max_output_tokens.',
    parameters: plain(ExecCommandBodySchema),
  },
  {
    type: 'function',
    name: 'write_stdin',
    description:
      'Writes chars to the stdin of a running command (by the session_id exec_command answered) and returns its new output; empty chars polls.',
    parameters: plain(WriteStdinBodySchema),
  },
];

/** A JSON value as a Python literal. */
function py(value: unknown, indent: string): string {
  if (value === null || value === undefined) return 'None';
  if (value === true) return 'True';
  if (value === false) return 'False';
  if (typeof value === 'number' || typeof value === 'string') return JSON.stringify(value);
  const inner = `${indent}    `;
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    return `[\n${value.map((v) => `${inner}${py(v, inner)},\n`).join('')}${indent}]`;
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return '{}';
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${py(v, inner)},\n`).join('')}${indent}}`;
}

/** A Python type to generate: its name, its schema and what it is (the docstring). */
export type PyType = readonly [name: string, schema: TSchema, doc: string];

/**
 * The wire types of what the SDK hands to its users (answers, callback arguments), named as the
 * server's static types are, with the unions and objects they are made of. Other objects inside
 * them are named after where they are (`EnvironmentInfoShell`, `SandboxPolicyReadOnly`).
 */
export const PY_TYPES: readonly PyType[] = [
  ['StreamName', StreamNameSchema, 'The stream of an output chunk; a PTY merges both into `pty`.'],
  ['TerminalStatus', TerminalStatusSchema, 'How a process ended.'],
  ['HibernationState', HibernationStateSchema, '`hibernated`: checkpointed and stopped; a call wakes it.'],
  ['TokenAccess', TokenAccessSchema, 'What a session token may do.'],
  ['ApprovalPurpose', ApprovalPurposeSchema, 'Why a command is asked about.'],
  ['ApprovalDecision', ApprovalDecisionSchema, 'What a person decided of a command.'],
  ['SandboxPolicy', SandboxPolicySchema, "A session's sandbox policy."],
  ['ApprovalPolicy', ApprovalPolicySchema, "A session's approval policy."],
  ['FileMetadata', FileMetadataSchema, 'What `fs/getMetadata` answers.'],
  ['DirectoryEntry', DirectoryEntrySchema, 'An entry of what `fs/readDirectory` answers.'],
  ['UploadResult', UploadResultSchema, 'What an upload (`PUT /v1/sessions/{id}/files/content`) answers.'],
  ['PreviewAnswer', PreviewSchema, 'An exposed port: `session/exposePort`, `/v1/sessions/{id}/ports`.'],
  ['ExposedPort', ExposedPortSchema, 'A port of the session exposed as a preview URL.'],
  ['SessionToken', SessionTokenSchema, 'A token that opens one session (`POST /v1/sessions/{id}/tokens`).'],
  ['ResourceUsage', ResourceUsageSchema, "A session's resource use now."],
  ['EgressInfo', EgressInfoSchema, "A session's egress: the allow list, the proxy, the counts so far."],
  ['SessionInfo', SessionInfoSchema, 'A session: `session/info`, `/v1/sessions` (the server may add keys).'],
  ['EnvironmentInfo', EnvironmentInfoSchema, "The session's environment as Codex reads it."],
  ['InitializeResult', InitializeResult, 'What `initialize` answers.'],
  ['SnapshotInfo', SnapshotInfoSchema, 'A snapshot: `session/snapshot`, `/v1/snapshots`.'],
  ['HibernationAnswer', HibernationAnswerSchema, 'What `session/hibernate` and `session/wake` answer.'],
  ['ProcessSummary', ProcessSummarySchema, 'A process of the session, as `process/list` answers it.'],
  ['ImagePull', ImagePullSchema, "A pull of the session's image: `session/imagePull`, `/v1/images/pulls`."],
  ['ApprovalRequest', ApprovalRequestSchema, 'The params of `approval/request`: which command wants to run, and why.'],
  ['ExecToolResult', ExecResultSchema, 'What the tool facade answers a finished or yielded call.'],
  ['PendingApproval', ApprovalSchema, 'An approval waiting for a person (`/v1/sessions/{id}/approvals`).'],
  ['ApprovalRequired', ApprovalRequiredSchema, 'A tool call that waits for a person to decide first.'],
  ['FunctionCallOutput', FunctionCallOutputSchema, 'The item to give back to the model for its tool call.'],
];

type Json = Readonly<Record<string, unknown>>;

/** Python's keywords: no field of a `TypedDict` class may be named so. */
const PY_KEYWORDS = new Set([
  ...'False None True and as assert async await break class continue def del elif else except'.split(' '),
  ...'finally for from global if import in is lambda nonlocal not or pass raise return try while'.split(' '),
  ...'with yield'.split(' '),
]);
const SCALARS: Readonly<Record<string, string>> = {
  string: 'str',
  integer: 'int',
  number: 'float',
  boolean: 'bool',
  null: 'None',
};

/** `workspace-write` -> `WorkspaceWrite`, `approvalPolicy` -> `ApprovalPolicy`. */
const pascal = (word: string): string =>
  word
    .split(/[^A-Za-z0-9]+/)
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join('');

/** Named schemas are found by their shape: `Type.Optional` and nesting copy them. */
function shapeKey(schema: Json): string {
  const { description: _, ...shape } = schema;
  return JSON.stringify(shape);
}

/**
 * Python type declarations (`TypedDict` classes and type aliases) from TypeBox schemas, each
 * after the ones it names (no `from __future__ import annotations`: with it, Python 3.11 counts
 * a `NotRequired` key as required).
 */
export class PythonTypes {
  readonly blocks: string[] = [];
  readonly typing = new Set<string>();
  private readonly named = new Map<string, string>();
  private readonly docs = new Map<string, string>();
  private readonly defined = new Set<string>();
  private readonly defining = new Set<string>();

  constructor(types: readonly PyType[]) {
    for (const [name, schema, doc] of types) {
      const key = shapeKey(schema as Json);
      const twin = this.named.get(key);
      if (twin !== undefined) throw new Error(`${name} has the shape of ${twin}: name one of them`);
      this.named.set(key, name);
      this.docs.set(name, doc);
    }
    for (const [name, schema] of types) this.define(name, schema as Json);
  }

  /** Declares `name` (once), after what it refers to. */
  private define(name: string, schema: Json): void {
    if (this.defined.has(name)) return;
    if (this.defining.has(name)) throw new Error(`${name} refers to itself`);
    this.defining.add(name);
    const props = schema['properties'] as Record<string, Json> | undefined;
    const doc = this.docs.get(name) ?? (schema['description'] as string | undefined);
    const docLine = doc === undefined ? [] : [`"""${doc.replaceAll('"""', "'''")}"""`];
    let block: string;
    if (schema['type'] === 'object' && props !== undefined && Object.keys(props).length > 0) {
      block = [`class ${name}(TypedDict):`, ...docLine.map((d) => `    ${d}`), '', ...this.fields(name, schema)]
        .join('\n')
        .replace(/:\n\n(?= {4}\w+:)/, ':\n');
      this.typing.add('TypedDict');
    } else {
      block = [`${name}: TypeAlias = ${this.inner(schema, name)}`, ...docLine].join('\n');
      this.typing.add('TypeAlias');
    }
    this.defining.delete(name);
    this.defined.add(name);
    this.blocks.push(block);
  }

  /** The fields of a `TypedDict`: its wire keys, `NotRequired` those the object may leave out. */
  private fields(name: string, schema: Json): string[] {
    const required = new Set((schema['required'] as string[] | undefined) ?? []);
    const lines: string[] = [];
    for (const [key, value] of Object.entries(schema['properties'] as Record<string, Json>)) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) || PY_KEYWORDS.has(key))
        throw new Error(`${name}.${key} cannot be a TypedDict field`);
      const type = this.expr(value, name + pascal(key));
      const description = value['description'];
      if (typeof description === 'string') lines.push(`    # ${description.replaceAll('\n', ' ')}`);
      if (required.has(key)) lines.push(`    ${key}: ${type}`);
      else {
        this.typing.add('NotRequired');
        lines.push(`    ${key}: NotRequired[${type}]`);
      }
    }
    return lines;
  }

  /** The type of `schema`: a named one by its name, else spelled out (`hint` names its objects). */
  expr(schema: Json, hint: string): string {
    const name = this.named.get(shapeKey(schema));
    if (name !== undefined) {
      this.define(name, schema);
      return name;
    }
    return this.inner(schema, hint);
  }

  private inner(schema: Json, hint: string): string {
    if (Array.isArray(schema['anyOf'])) return this.union(schema['anyOf'] as Json[], hint);
    if ('const' in schema) return this.literal([schema['const']]);
    const type = schema['type'];
    const items = schema['items'];
    // A tuple (`items` as a list) has no `list[...]`: it falls through to the error below.
    if (type === 'array' && typeof items === 'object' && items !== null && !Array.isArray(items))
      return `list[${this.expr(items as Json, `${hint}Item`)}]`;
    if (type === 'object') return this.object(schema, hint);
    if (typeof type === 'string' && SCALARS[type] !== undefined) return SCALARS[type];
    if (type === undefined && Object.keys(schema).every((k) => k === 'description')) {
      this.typing.add('Any');
      return 'Any';
    }
    throw new Error(`${hint}: no Python type for ${JSON.stringify(schema)}`);
  }

  private object(schema: Json, hint: string): string {
    const patterns = schema['patternProperties'] as Record<string, Json> | undefined;
    const values = patterns === undefined ? [] : Object.values(patterns);
    if (values.length === 1 && values[0] !== undefined) return `dict[str, ${this.expr(values[0], `${hint}Value`)}]`;
    if (Object.keys((schema['properties'] as object | undefined) ?? {}).length === 0)
      throw new Error(`${hint}: an object without properties has no TypedDict`);
    this.define(hint, schema);
    return hint;
  }

  /** Literal members as one `Literal[...]`; an object member named by its tag or its one key. */
  private union(members: readonly Json[], hint: string): string {
    const consts = members.filter((m) => 'const' in m).map((m) => m['const']);
    const parts = consts.length > 0 ? [this.literal(consts)] : [];
    let hasNull = false;
    for (const [i, member] of members.entries()) {
      if ('const' in member) continue;
      if (member['type'] === 'null') hasNull = true;
      else parts.push(this.expr(member, hint + this.variant(member, i)));
    }
    return [...parts, ...(hasNull ? ['None'] : [])].join(' | ');
  }

  private variant(member: Json, index: number): string {
    const props = Object.entries((member['properties'] as Record<string, Json> | undefined) ?? {});
    const tag = props.find(([, v]) => typeof v['const'] === 'string');
    if (tag !== undefined) return pascal(tag[1]['const'] as string);
    const only = props.length === 1 ? props[0] : undefined;
    return only !== undefined ? pascal(only[0]) : `Variant${index}`;
  }

  private literal(values: readonly unknown[]): string {
    this.typing.add('Literal');
    return `Literal[${values.map((v) => py(v, '')).join(', ')}]`;
  }
}

export function render(types: readonly PyType[] = PY_TYPES): string {
  const registry = Object.entries(ERROR_REGISTRY)
    .map(([code, [status, rpc]]) => `    ${JSON.stringify(code)}: (${status}, ${rpc}),\n`)
    .join('');
  const wire = new PythonTypes(types);
  const typing = [...new Set([...wire.typing, 'Any'])].sort();
  return [
    '"""Generated by scripts/gen-python-sdk.ts from the server\'s sources: do not edit."""',
    `from typing import ${typing.join(', ')}`,
    '',
    '# src/errors.ts ERROR_REGISTRY: code -> (HTTP status, JSON-RPC code).',
    `ERROR_REGISTRY: dict[str, tuple[int, int]] = {\n${registry}}`,
    '',
    '# src/errors.ts RETRYABLE_CODES: codes whose call may succeed later unchanged.',
    `RETRYABLE: frozenset[str] = frozenset({\n${[...RETRYABLE_CODES].map((c) => `    ${JSON.stringify(c)},\n`).join('')}})`,
    '',
    '# src/protocol/common.ts SIGNAL_NAMES.',
    `SIGNAL_NAMES: tuple[str, ...] = (${SIGNAL_NAMES.map((s) => JSON.stringify(s)).join(', ')})`,
    '',
    '# src/protocol/session.ts MAX_SESSION_BATCH: sessions one batch create makes at most.',
    `MAX_SESSION_BATCH: int = ${MAX_SESSION_BATCH}`,
    '',
    '# The tool facade (src/protocol/tools.ts): function-tool definitions for a model.',
    `TOOL_DEFINITIONS: list[dict[str, Any]] = ${py(TOOLS, '')}`,
    '',
    '# ---- Wire types (src/protocol/): the JSON the server sends, its camelCase keys as they are.',
    ...wire.blocks.flatMap((b) => ['', '', b]),
    '',
  ].join('\n');
}

function main(): void {
  const text = render();
  if (process.argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(TARGET, 'utf8');
    } catch {
      // missing: a difference
    }
    if (current !== text) {
      console.error('clients/python/exec_server/_generated.py is out of date: run scripts/gen-python-sdk.ts');
      process.exit(1);
    }
    console.log('clients/python/exec_server/_generated.py matches the server');
  } else {
    writeFileSync(TARGET, text);
    console.log(`wrote ${TARGET.pathname}`);
  }
}

// Run as a script, not when a test imports `render`.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
