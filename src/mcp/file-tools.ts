/**
 * `read_file`, `write_file`, `list_dir`: through `SessionFiles`, so the session's sandbox and
 * deny-read list apply exactly as they do to `fs/*` and the HTTP file routes. Answers are
 * bounded for a model's context: a read returns at most `max_bytes` (and says where to go on),
 * a listing at most `MAX_LIST_ENTRIES` entries.
 */
import { posix } from 'node:path';
import { TextDecoder } from 'node:util';
import { execError } from '../errors.ts';
import { decodeBase64 } from '../rpc/methods/fs-methods.ts';
import type { Session } from '../sessions/session.ts';
import type { SessionFiles } from '../sessions/files/session-files.ts';
import { textResult } from './results.ts';
import {
  DEFAULT_READ_BYTES,
  ListDirArgsSchema,
  MAX_LIST_ENTRIES,
  ReadFileArgsSchema,
  WriteFileArgsSchema,
  type ListDirToolArgs,
  type ReadFileToolArgs,
  type WriteFileToolArgs,
} from './schemas.ts';
import { defineTool, SESSION_NOTE, sessionOf, type ToolContext } from './tool-context.ts';

function filesOf(_ctx: ToolContext, session: Session): SessionFiles {
  return session.files;
}

/** A path the model names: absolute and `file://` as they are, relative ones under the workspace. */
function sessionPath(session: Session, files: SessionFiles, raw: string): string {
  const absolute = raw.startsWith('/') || raw.startsWith('file://') ? raw : posix.join(session.backend.workdir, raw);
  return files.resolvePath(absolute);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The bytes as text when they are UTF-8 (a sequence cut at the end is left for the next read), else undefined. */
function asText(bytes: Buffer): { text: string; used: number } | undefined {
  if (bytes.includes(0)) return undefined;
  for (let cut = 0; cut <= Math.min(3, bytes.length); cut++) {
    try {
      return { text: utf8.decode(bytes.subarray(0, bytes.length - cut)), used: bytes.length - cut };
    } catch {
      // try again without a sequence cut at the end
    }
  }
  return undefined;
}

async function readSome(stream: NodeJS.ReadableStream, max: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      parts.push(chunk);
      total += chunk.length;
      if (total >= max) break;
    }
  } finally {
    (stream as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
  }
  return Buffer.concat(parts).subarray(0, max);
}

/** MCP `read_file`: a file of the session, text as it is, other bytes as base64. */
export const readFileTool = defineTool({
  name: 'read_file',
  title: 'Read a file',
  description: `Reads a file of the session (text as it is; other bytes as base64), at most max_bytes from offset. ${SESSION_NOTE}`,
  schema: ReadFileArgsSchema,
  annotations: { readOnlyHint: true },
  async run(args: ReadFileToolArgs, ctx) {
    const session = await sessionOf(ctx, args.session);
    const files = filesOf(ctx, session);
    const offset = args.offset ?? 0;
    const max = args.max_bytes ?? DEFAULT_READ_BYTES;
    const { stream, size, path } = await files.openDownload(sessionPath(session, files, args.path), offset);
    const bytes = await readSome(stream, max);
    const decoded = asText(bytes);
    const used = decoded?.used ?? bytes.length;
    const end = offset + used;
    const more = end < size ? `\n[${size - end} more bytes: read on with "offset": ${end}]` : '';
    const structured = { path, size, offset, bytes: used, encoding: decoded ? 'utf8' : 'base64', eof: end >= size };
    if (decoded) return textResult(`${decoded.text}${more}`, structured);
    return textResult(
      `[binary file ${path}, ${size} bytes; bytes ${offset}..${end} as base64]\n${bytes.toString('base64')}${more}`,
      structured,
    );
  },
});

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * `content` sent as base64, decoded as strictly as `fs/writeFile` decodes: `Buffer.from` skips
 * what is not base64, so "!!!" used to truncate the file to 0 bytes and answer success. Line
 * breaks and spaces (base64 wrapped at 76 columns, as MIME encoders write it) are dropped first.
 */
function decodeContent(content: string): Buffer {
  const compact = content.replace(/\s+/g, '');
  if (!BASE64.test(compact))
    throw execError('EXEC_ERR_INVALID_PARAMS', 'invalid params: content: not valid base64 (encoding is base64)', {
      detail: { field: 'content' },
    });
  return decodeBase64(compact, 'content');
}

/** MCP `write_file`: creates or replaces a file of the session. */
export const writeFileTool = defineTool({
  name: 'write_file',
  title: 'Write a file',
  description: `Creates or replaces a file of the session with content (utf8 text, or base64). The session's sandbox decides where writes may land. ${SESSION_NOTE}`,
  schema: WriteFileArgsSchema,
  annotations: { destructiveHint: true },
  async run(args: WriteFileToolArgs, ctx) {
    const session = await sessionOf(ctx, args.session);
    const files = filesOf(ctx, session);
    const path = sessionPath(session, files, args.path);
    const data = args.encoding === 'base64' ? decodeContent(args.content) : Buffer.from(args.content, 'utf8');
    if (args.create_parents !== false) {
      const parent = posix.dirname(path);
      const exists = await files.getMetadata(parent).then(
        () => true,
        () => false,
      );
      if (!exists) await files.createDirectory(parent, true);
    }
    await files.writeFile(path, data);
    return textResult(`wrote ${data.length} bytes to ${path}`, { path, bytes: data.length });
  },
});

/** MCP `list_dir`: a directory of the session, its workspace by default. */
export const listDirTool = defineTool({
  name: 'list_dir',
  title: 'List a directory',
  description: `Lists a directory of the session (default: its workspace); directories end in "/". ${SESSION_NOTE}`,
  schema: ListDirArgsSchema,
  annotations: { readOnlyHint: true },
  async run(args: ListDirToolArgs, ctx) {
    const session = await sessionOf(ctx, args.session);
    const files = filesOf(ctx, session);
    const path = sessionPath(session, files, args.path ?? session.backend.workdir);
    const entries = (await files.readDirectory(path)).sort((a, b) =>
      a.fileName < b.fileName ? -1 : a.fileName > b.fileName ? 1 : 0,
    );
    const shown = entries.slice(0, MAX_LIST_ENTRIES);
    const lines = shown.map((e) => (e.isDirectory ? `${e.fileName}/` : e.fileName));
    if (entries.length > shown.length) lines.push(`[${entries.length - shown.length} more entries not shown]`);
    const header = `${path} (${entries.length} ${entries.length === 1 ? 'entry' : 'entries'})`;
    return textResult([header, ...lines].join('\n'), {
      path,
      total: entries.length,
      entries: shown.map((e) => ({ ...e })),
    });
  },
});
