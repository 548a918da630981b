/** Shared CLI plumbing: options, defaults, readable errors. */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { ExecServerClient } from '../client/client.ts';
import { ExecServerHttpError } from '../client/errors.ts';
import { RpcError } from '../client/rpc-connection.ts';
import { describeImagePull, type ImagePull } from '../protocol/index.ts';
import { DEFAULT_LISTEN } from '../config/listen.ts';

/** Where the client commands look for the server: where it listens by default. */
export const DEFAULT_URL = DEFAULT_LISTEN;

/** Exit code for failures of exec-server itself (not of the command), as `docker run` uses 125. */
export const EXIT_CLI_ERROR = 125;
/** Exit code for a command line the client commands cannot parse. */
export const EXIT_USAGE = 2;

/** A mistake in the command line: printed as one line, exit 2, never with a stack. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** The options every client command takes: where the server is, its token, JSON output, help. */
export const connectionOptions = {
  url: { type: 'string' },
  token: { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const satisfies ParseArgsConfig['options'];

/** Where a client command connects: the server's URL and the token, if any. */
export interface Connection {
  readonly url: string;
  readonly token: string | undefined;
}

/** The connection from the flags, else `EXEC_SERVER_URL` and `EXEC_SERVER_TOKEN`, else the default URL. */
export function connectionOf(
  values: { url?: string | undefined; token?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
): Connection {
  return { url: values.url ?? env['EXEC_SERVER_URL'] ?? DEFAULT_URL, token: values.token ?? env['EXEC_SERVER_TOKEN'] };
}

/** Parses a client command's arguments strictly; a mistake is a `UsageError`. */
export function parse<O extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: O) {
  try {
    return parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** What `parse` gives for `options`. */
export type Parsed<O extends NonNullable<ParseArgsConfig['options']>> = ReturnType<typeof parse<O>>;

/**
 * The frame of a command that talks to a server (`run`, `shell`, `sessions`): its flags parsed
 * with the connection's, `help` printed for --help, and a failure printed as one line (also as a
 * JSON object with --json) and answered with its exit code.
 */
export async function clientCommand<O extends NonNullable<ParseArgsConfig['options']>>(
  args: string[],
  options: O,
  help: string,
  body: (parsed: Parsed<typeof connectionOptions & O>) => Promise<number>,
): Promise<number> {
  let json = false;
  try {
    const parsed = parse(args, { ...connectionOptions, ...options });
    const flags = parsed.values as { json?: boolean; help?: boolean };
    json = flags.json === true;
    if (flags.help) {
      process.stdout.write(`${help}\n`);
      return 0;
    }
    return await body(parsed);
  } catch (err) {
    return printError(err, json);
  }
}

/** One readable line for any error (no stack traces for expected failures). */
export function describeError(err: unknown): string {
  if (err instanceof ExecServerHttpError && err.code === 'EXEC_ERR_UNAUTHORIZED')
    return `the server refused the token (${err.code}, HTTP ${err.status}); set --token or EXEC_SERVER_TOKEN`;
  if (err instanceof ExecServerHttpError) return `${err.message} (${err.code}, HTTP ${err.status})`;
  if (err instanceof RpcError) return `${err.message}${err.code ? ` (${err.code})` : ''}`;
  const e = err as NodeJS.ErrnoException & { statusCode?: number };
  if (e?.statusCode === 401) return 'the server refused the token (HTTP 401); set --token or EXEC_SERVER_TOKEN';
  if (e?.code === 'ECONNREFUSED')
    return `cannot connect to the server: ${e.message}; is it running? (--url or EXEC_SERVER_URL)`;
  const cause = (e as { cause?: NodeJS.ErrnoException })?.cause;
  if (cause?.code === 'ECONNREFUSED')
    return `cannot connect to the server: ${cause.message}; is it running? (--url or EXEC_SERVER_URL)`;
  if (cause instanceof Error && e instanceof Error) return `${e.message}: ${cause.message}`;
  return e instanceof Error ? e.message : String(err);
}

/** Prints an error as one line (or JSON with `--json`) and returns the exit code it means. */
export function printError(err: unknown, json: boolean): number {
  if (err instanceof UsageError) {
    process.stderr.write(`exec-server: ${err.message}\n`);
    return EXIT_USAGE;
  }
  const message = describeError(err);
  if (json)
    process.stdout.write(`${JSON.stringify({ error: { message, code: (err as { code?: string })?.code ?? null } })}\n`);
  process.stderr.write(`exec-server: error: ${message}\n`);
  return EXIT_CLI_ERROR;
}

/** Exit codes are 0..255; `lost` (-1) becomes 255. */
export function shellExitCode(code: number): number {
  return code < 0 || code > 255 ? 255 : code;
}

/** On a pipe or file, a waiting pull prints a line at most this often (a terminal's line is rewritten). */
const PULL_LINE_EVERY_MS = 5000;

/** The flags of a command that creates a session (`run`, `shell`): read by `sessionOptions`. */
export const sessionCreationOptions = {
  image: { type: 'string' },
  'allow-network': { type: 'string', multiple: true },
} as const satisfies ParseArgsConfig['options'];

/**
 * The session a `run` or `shell` creates: its image, and with `--allow-network` the destinations
 * its egress proxy lets through (`network.allow`); undefined: the server's defaults.
 */
export function sessionOptions(
  image: string | undefined,
  allow: readonly string[] | undefined,
): { image?: string; network?: { allow: string[] } } | undefined {
  if (image === undefined && (allow === undefined || allow.length === 0)) return undefined;
  return {
    ...(image !== undefined ? { image } : {}),
    ...(allow !== undefined && allow.length > 0 ? { network: { allow: [...allow] } } : {}),
  };
}

/** The client name the CLI's connections give the server. */
export const CLI_CLIENT_NAME = 'exec-server-cli';

/**
 * A client on a new session as `run` and `shell` make one: the server and token of the flags or
 * the environment, the session of `--image` and `--allow-network`, image pulls printed.
 */
export function connectNewSession(values: {
  url?: string | undefined;
  token?: string | undefined;
  image?: string | undefined;
  'allow-network'?: string[] | undefined;
}): Promise<ExecServerClient> {
  const { url, token } = connectionOf(values);
  return ExecServerClient.connect(url, {
    token,
    clientName: CLI_CLIENT_NAME,
    session: sessionOptions(values.image, values['allow-network']),
    onImagePull: imagePullPrinter(),
  });
}

/**
 * Prints the progress of the image pull a new session waits for (`onImagePull`) on `out`: one
 * line rewritten in place on a terminal; elsewhere a line at most every 5 s, and the last word.
 */
export function imagePullPrinter(out: NodeJS.WriteStream = process.stderr): (pull: ImagePull) => void {
  let printed = 0;
  return (p) => {
    const final = p.phase !== 'pulling';
    const figures = p.layers === 0 ? '' : `: ${describeImagePull(p)}`;
    const verb = p.phase === 'pulled' ? 'pulled' : p.phase === 'failed' ? 'could not pull' : 'pulling';
    const line = `[exec-server] ${verb} image ${p.image}${figures}`;
    if (out.isTTY) {
      out.write(`\r\x1b[K${line}${final ? '\n' : ''}`);
      return;
    }
    if (!final && Date.now() - printed < PULL_LINE_EVERY_MS) return;
    printed = Date.now();
    out.write(`${line}\n`);
  };
}
