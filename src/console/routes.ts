/**
 * The web console at `/console/`: the static files `npm run build` bundles from `web/` into
 * `build/console/`, served from memory. They are read once at startup from a fixed directory,
 * so no request path ever reaches the filesystem. The files are public (they hold no data);
 * everything they show comes from the API with the tenant token the user signs in with.
 * Every answer carries a strict CSP: scripts only from this origin's `/console/`, no framing.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { execError, httpErrorBody } from '../errors.ts';
import { originOf } from '../transport/origin.ts';

/** Where the console is served; its files' answers and CSP are scoped to it. */
export const CONSOLE_PREFIX = '/console';

/** Where `web/build.mjs` writes the bundle. */
export const CONSOLE_BUILD_DIR = fileURLToPath(new URL('../../build/console/', import.meta.url));

/**
 * What the console may load: its own files only, named by `origin/console/` rather than
 * `'self'`, which would also trust whatever a session serves on this origin under
 * `/v1/sessions/:id/ports/` (preview paths). API calls and the WebSocket stay `'self'`.
 * xterm.js sets its theme through a generated <style>, hence styles 'unsafe-inline' (scripts never).
 * `origin` unknown (no usable Host): nothing loads.
 */
export function consoleCsp(origin: string | undefined): string {
  const files = origin === undefined ? "'none'" : `${origin}${CONSOLE_PREFIX}/`;
  return [
    "default-src 'none'",
    `script-src ${files}`,
    `style-src ${files} 'unsafe-inline'`,
    `img-src ${files} data:`,
    `font-src ${files}`,
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.woff2': 'font/woff2',
};

/** Bounds on what is loaded into memory (the bundle is well under both). */
const MAX_FILES = 64;
const MAX_TOTAL_BYTES = 32 * 1024 * 1024;

interface Asset {
  readonly body: Buffer;
  readonly type: string;
  readonly etag: string;
}

/** Whether a request path belongs to the console (served without a token). */
export function isConsolePath(path: string): boolean {
  return path === CONSOLE_PREFIX || path.startsWith(`${CONSOLE_PREFIX}/`);
}

function loadAssets(dir: string): Map<string, Asset> | undefined {
  const assets = new Map<string, Asset>();
  let total = 0;
  const walk = (at: string): void => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const full = join(at, entry.name);
      if (entry.isDirectory()) {
        walk(full);
        continue;
      }
      const type = TYPES[entry.name.slice(entry.name.lastIndexOf('.'))];
      if (!entry.isFile() || type === undefined) continue;
      total += statSync(full).size;
      if (assets.size >= MAX_FILES || total > MAX_TOTAL_BYTES)
        throw execError(
          'EXEC_ERR_CONFIG',
          `${dir} holds more than ${MAX_FILES} files or ${MAX_TOTAL_BYTES} bytes: not a console build`,
        );
      const body = readFileSync(full);
      assets.set(`/${relative(dir, full).split('\\').join('/')}`, {
        body,
        type,
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
      });
    }
  };
  try {
    walk(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  return assets.has('/index.html') ? assets : undefined;
}

function secure(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return reply
    .header('content-security-policy', consoleCsp(originOf(request.raw)))
    .header('x-content-type-options', 'nosniff')
    .header('x-frame-options', 'DENY')
    .header('referrer-policy', 'no-referrer')
    .header('cross-origin-opener-policy', 'same-origin')
    .header('cross-origin-resource-policy', 'same-origin');
}

const NOT_BUILT = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>exec-server console</title></head>
<body style="font-family:sans-serif;margin:3rem"><h1>The console is not built</h1>
<p>Its files are bundled from <code>web/</code> by <code>npm ci</code> or <code>npm run build</code>; run one of them and restart the server.</p></body></html>`;

/** Registers `/console/` (and the redirect from `/console`). `dir` defaults to the build output. */
export function registerConsole(app: FastifyInstance, opts: { dir?: string } = {}): void {
  const assets = loadAssets(opts.dir ?? CONSOLE_BUILD_DIR);
  app.get(CONSOLE_PREFIX, { schema: { hide: true } }, async (request, reply) =>
    secure(request, reply).redirect(`${CONSOLE_PREFIX}/`, 308),
  );
  app.get(`${CONSOLE_PREFIX}/*`, { schema: { hide: true } }, async (request, reply) => {
    secure(request, reply);
    if (assets === undefined) return reply.code(503).type('text/html; charset=utf-8').send(NOT_BUILT);
    const rest = (request.params as { '*': string })['*'];
    const asset = assets.get(rest === '' ? '/index.html' : `/${rest}`);
    if (asset === undefined)
      return reply
        .code(404)
        .send(httpErrorBody(execError('EXEC_ERR_NOT_FOUND', `no console file ${request.url.split('?')[0]}`)));
    // Names are not content-hashed: revalidate every time (an unchanged file answers 304).
    reply.header('cache-control', 'no-cache').header('etag', asset.etag);
    if (request.headers['if-none-match'] === asset.etag) return reply.code(304).send();
    return reply.type(asset.type).send(asset.body);
  });
}
