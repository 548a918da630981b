/**
 * HTTP JSON bodies are never changed to fit (src/transport/json-body.ts): invalid UTF-8 is
 * refused with its offset before anything runs, valid UTF-8 arrives byte for byte however its
 * chunks were cut, and a `__proto__` key means what it means on the WebSocket path (an own
 * key: an env variable of that name reaches the command), except on MCP, whose SDK would drop
 * it silently: there it is refused, naming the key. The body limit and the empty body's answer
 * stay as they were.
 */
import assert from 'node:assert/strict';
import { isUtf8 } from 'node:buffer';
import { request } from 'node:http';
import { test } from 'node:test';
import { MCP_PATH } from '../../src/protocol/index.ts';
import { firstInvalidUtf8 } from '../../src/transport/json-body.ts';
import { serverWithApi, type Api } from '../http/helpers.ts';

interface Sent {
  readonly status: number;
  readonly body: { code?: string; message?: string; sessions?: unknown[]; output?: string };
  readonly raw: Buffer;
}

/**
 * `chunks` written one by one as the request body (chunked: no content-length), with
 * `content-type: application/json` unless `headers` say otherwise.
 */
function send(base: string, method: string, path: string, chunks: Buffer[], headers = {}): Promise<Sent> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { method, headers: { 'content-type': 'application/json', ...headers } });
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const raw = Buffer.concat(parts);
        let body: Sent['body'] = {};
        try {
          body = raw.length === 0 ? {} : (JSON.parse(raw.toString('utf8')) as Sent['body']);
        } catch {
          body = { message: raw.toString('utf8') };
        }
        resolve({ status: res.statusCode ?? 0, body, raw });
      });
    });
    const writeNext = (i: number): void => {
      if (i === chunks.length) return void req.end();
      req.write(chunks[i], () => setImmediate(() => writeNext(i + 1)));
    };
    writeNext(0);
  });
}

/** A JSON text with `marker` (a string of its own) replaced by `bytes`, as they are. */
function withBytes(json: unknown, marker: string, bytes: Buffer): Buffer {
  const text = JSON.stringify(json);
  const at = text.indexOf(marker);
  assert.ok(at >= 0, `${marker} in ${text}`);
  return Buffer.concat([Buffer.from(text.slice(0, at)), bytes, Buffer.from(text.slice(at + marker.length))]);
}

/** A Codex `function_call` item of exec_command running `cmd`. */
const execCall = (cmd: string) => ({
  type: 'function_call',
  id: 'fc_1',
  call_id: 'call_1',
  name: 'exec_command',
  arguments: JSON.stringify({ cmd, login: false }),
  status: 'completed',
});

/** A new session: its id and working directory. */
async function sessionOf(api: Api): Promise<{ id: string; workdir: string }> {
  const made = await api<{ sessionId: string; workdir: string }>('POST', '/v1/sessions', {});
  assert.equal(made.status, 201, JSON.stringify(made.body));
  return { id: made.body.sessionId, workdir: made.body.workdir };
}

const NOT_UTF8 = /^the request body is not valid UTF-8 \(invalid byte at offset (\d+)\); JSON bodies must be UTF-8$/;

test('invalid UTF-8 in a session create: 400 naming the offset, and no session', async (t) => {
  const api = await serverWithApi(t);
  const base = api.server.httpUrl;
  // An env value with a lone 0xFF, once with a charset parameter: refused either way.
  const spec = withBytes({ env: { GREETING: 'hi-MARK' } }, 'MARK', Buffer.from([0xff]));
  for (const type of ['application/json', 'application/json; charset=utf-8']) {
    const created = await send(base, 'POST', '/v1/sessions', [spec], { 'content-type': type });
    assert.equal(created.status, 400, created.raw.toString());
    assert.equal(created.body.code, 'EXEC_ERR_INVALID_REQUEST');
    assert.equal(Number(NOT_UTF8.exec(created.body.message ?? '')?.[1]), spec.indexOf(0xff), created.body.message);
  }
  const listed = await api<{ sessions: unknown[] }>('GET', '/v1/sessions');
  assert.deepEqual(listed.body.sessions, []);
});

test('invalid UTF-8 in a tool call: 400 naming the offset, and the command never runs', async (t) => {
  const api = await serverWithApi(t);
  const base = api.server.httpUrl;
  // A command writing a file, its name cut in a 4-byte character (F0 9F 98, no last byte).
  const { id, workdir } = await sessionOf(api);
  const cut = Buffer.from([0xf0, 0x9f, 0x98]);
  const item = withBytes(execCall('echo ran > ran-MARK.txt'), 'MARK', cut);
  const ran = await send(base, 'POST', `/v1/sessions/${id}/tool-calls`, [item]);
  assert.equal(ran.status, 400, ran.raw.toString());
  assert.equal(ran.body.code, 'EXEC_ERR_INVALID_REQUEST');
  assert.equal(Number(NOT_UTF8.exec(ran.body.message ?? '')?.[1]), item.indexOf(cut), ran.body.message);
  const listing = await api<{ entries: { fileName: string }[] }>(
    'GET',
    `/v1/sessions/${id}/files/list?path=${encodeURIComponent(workdir)}`,
  );
  assert.equal(listing.status, 200, JSON.stringify(listing.body));
  assert.deepEqual(
    listing.body.entries.filter((e) => e.fileName.startsWith('ran-')),
    [],
    'no file of the refused command',
  );
});

test('valid UTF-8, a 4-byte character cut across chunks: a file written through JSON reads back byte for byte', async (t) => {
  const api = await serverWithApi(t);
  const base = api.server.httpUrl;
  const { id, workdir } = await sessionOf(api);
  const content = 'héllo 中文 😀 𝄞';
  const item = Buffer.from(JSON.stringify(execCall(`printf '%s' '${content}' > utf8.txt`)));
  // Cut inside the emoji's four bytes (after its second), and inside the CJK character.
  const emoji = item.indexOf(Buffer.from('😀'));
  const cjk = item.indexOf(Buffer.from('中'));
  const chunks = [item.subarray(0, cjk + 1), item.subarray(cjk + 1, emoji + 2), item.subarray(emoji + 2)];
  const ran = await send(base, 'POST', `/v1/sessions/${id}/tool-calls`, chunks);
  assert.equal(ran.status, 200, ran.raw.toString());
  const file = await fetch(`${base}/v1/sessions/${id}/files/content?path=${encodeURIComponent(`${workdir}/utf8.txt`)}`);
  assert.equal(file.status, 200);
  assert.deepEqual(Buffer.from(await file.arrayBuffer()), Buffer.from(content));
});

test('__proto__ in a REST body: an own key as on the WebSocket path (an env variable reaches the command)', async (t) => {
  const api = await serverWithApi(t);
  const base = api.server.httpUrl;
  const spec = Buffer.from('{"env": {"__proto__": "from-http", "OTHER": "x"}}');
  const created = await send(base, 'POST', '/v1/sessions', [spec]);
  assert.equal(created.status, 201, created.raw.toString());
  const id = (created.body as { sessionId?: string }).sessionId ?? '';
  const ran = await send(base, 'POST', `/v1/sessions/${id}/tool-calls`, [Buffer.from(JSON.stringify(execCall('env')))]);
  assert.equal(ran.status, 200, ran.raw.toString());
  assert.match(ran.body.output ?? '', /^__proto__=from-http$/m);
  assert.equal(({} as Record<string, unknown>)['OTHER'], undefined, 'no prototype changed');

  // A key no schema declares is the schema's refusal, naming the key, as any unknown field.
  for (const key of ['__proto__', 'constructor']) {
    const body = Buffer.from(`{"${key}": {"prototype": {"x": 1}}}`);
    const refused = await send(base, 'POST', '/v1/sessions', [body]);
    assert.equal(refused.status, 400, refused.raw.toString());
    assert.equal(refused.body.code, 'EXEC_ERR_INVALID_PARAMS', refused.raw.toString());
    assert.match(refused.body.message ?? '', new RegExp(`^body/${key} `));
  }
  assert.equal(({} as Record<string, unknown>)['x'], undefined, 'no prototype changed');
});

test('__proto__ and constructor.prototype on MCP: refused before its SDK sees (and drops) them, naming the key', async (t) => {
  const api = await serverWithApi(t);
  const base = api.server.httpUrl;
  const init = (extra: string) =>
    Buffer.from(
      `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},` +
        `"clientInfo":{"name":"t","version":"1"},${extra}}}`,
    );
  const accept = { accept: 'application/json, text/event-stream' };
  const proto = await send(base, 'POST', MCP_PATH, [init('"__proto__":{"x":1}')], accept);
  assert.equal(proto.status, 400, proto.raw.toString());
  assert.deepEqual(proto.body, {
    code: 'EXEC_ERR_INVALID_REQUEST',
    message: `the key "__proto__" is not accepted in a JSON body on ${MCP_PATH}`,
  });
  const ctor = await send(base, 'POST', MCP_PATH, [init('"constructor":{"prototype":{"x":1}}')], accept);
  assert.equal(ctor.status, 400, ctor.raw.toString());
  assert.deepEqual(ctor.body, {
    code: 'EXEC_ERR_INVALID_REQUEST',
    message: `the key "constructor" holding a "prototype" is not accepted in a JSON body on ${MCP_PATH}`,
  });
});

test('body limit and empty body: answered as before the strict parser', async (t) => {
  const api = await serverWithApi(t, { flags: ['--max-message-bytes', '2048'] });
  const base = api.server.httpUrl;
  // Over the limit (invalid UTF-8 too): the limit answers first, before any decoding.
  const big = withBytes({ env: { A: 'MARK' } }, 'MARK', Buffer.concat([Buffer.alloc(3000, 0x61), Buffer.from([0xff])]));
  const tooLarge = await send(base, 'POST', '/v1/sessions', [big]);
  assert.equal(tooLarge.status, 413, tooLarge.raw.toString());
  assert.equal(tooLarge.body.code, 'EXEC_ERR_TOO_LARGE');
  const empty = await send(base, 'POST', '/v1/sessions', []);
  assert.equal(empty.status, 400, empty.raw.toString());
  assert.deepEqual(empty.body, {
    code: 'EXEC_ERR_INVALID_REQUEST',
    message: "Body cannot be empty when content-type is set to 'application/json'",
  });
  const malformed = await send(base, 'POST', '/v1/sessions', [Buffer.from('{"env": ')]);
  assert.deepEqual(malformed.body, {
    code: 'EXEC_ERR_INVALID_REQUEST',
    message: "Body is not valid JSON but content-type is set to 'application/json'",
  });
  const listed = await api<{ sessions: unknown[] }>('GET', '/v1/sessions');
  assert.deepEqual(listed.body.sessions, []);
});

test('the offset named is where the first sequence that is not UTF-8 starts', () => {
  const cases: [number[], number][] = [
    [[0x61, 0x62], -1],
    [[0x61, 0xe4, 0xb8, 0xad, 0xf0, 0x9f, 0x98, 0x80], -1],
    [[0x61, 0x80], 1], // a continuation byte with no lead
    [[0x61, 0xc0, 0x80], 1], // overlong
    [[0x61, 0x62, 0xed, 0xa0, 0x80], 2], // a surrogate
    [[0xf4, 0x90, 0x80, 0x80], 0], // past U+10FFFF
    [[0x61, 0xe4, 0xb8], 1], // cut at the end
    [[0xe4, 0xb8, 0xad, 0xe4, 0x41, 0xad], 3], // cut by an ASCII byte
  ];
  for (const [bytes, at] of cases) {
    const buf = Buffer.from(bytes);
    assert.equal(firstInvalidUtf8(buf), at, buf.toString('hex'));
    assert.equal(at === -1, isUtf8(buf), `isUtf8 agrees on ${buf.toString('hex')}`);
  }
});
