/**
 * Connection to the Docker engine and the two rules every call follows: a deadline (an engine
 * that is down or wedged must give EXEC_ERR_BACKEND_UNAVAILABLE in seconds, not hang) and one
 * mapping of docker-modem errors to the error registry.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Docker from 'dockerode';
import { execError, ExecServerError } from '../../../errors.ts';
import { DEFAULT_DOCKER_SOCKET, type DockerHostAddress, parseDockerHost } from '../../../config/docker-host.ts';
import { pidHint } from './host-pids.ts';

/**
 * Builds a dockerode client for `dockerHost` (see `DockerBackendOptions.dockerHost`).
 * No modem-level `timeout`: docker-modem applies it as a socket idle timeout, which would also
 * cut hijacked exec streams of quiet commands. Deadlines are per call instead (`withDeadline`).
 */
export function createDockerClient(dockerHost: string | undefined, env: NodeJS.ProcessEnv = process.env): Docker {
  const host = dockerHost ?? env.DOCKER_HOST;
  if (host === undefined || host === '') return new Docker({ socketPath: DEFAULT_DOCKER_SOCKET });
  let address: DockerHostAddress;
  try {
    address = parseDockerHost(host, 'docker host');
  } catch (err) {
    throw execError('EXEC_ERR_CONFIG', `unsupported docker host ${host}`, { cause: err });
  }
  if (address.kind === 'socket') return new Docker({ socketPath: address.path });
  const tls = clientTls(env);
  // As the docker CLI: tcp:// is TLS when DOCKER_TLS_VERIFY=1 or client certificates are given.
  if (address.protocol === 'http' && tls === undefined && env.DOCKER_TLS_VERIFY !== '1')
    return new Docker({ host: address.host, port: address.port ?? '2375', protocol: 'http' });
  return new Docker({ host: address.host, port: address.port ?? '2376', protocol: 'https', ...tls });
}

/**
 * The client certificate, key and CA of `DOCKER_CERT_PATH` (`cert.pem`, `key.pem`, `ca.pem`, as
 * the docker CLI reads them): engines across the network (a fleet's engine StatefulSet) accept
 * only clients with a certificate of their CA, and the server checks the engine's against it.
 */
function clientTls(env: NodeJS.ProcessEnv): { ca: Buffer; cert: Buffer; key: Buffer } | undefined {
  const dir = env.DOCKER_CERT_PATH;
  if (dir === undefined || dir === '') return undefined;
  try {
    const read = (name: string): Buffer => readFileSync(join(dir, name));
    return { ca: read('ca.pem'), cert: read('cert.pem'), key: read('key.pem') };
  } catch (err) {
    throw execError('EXEC_ERR_CONFIG', `DOCKER_CERT_PATH ${dir}: ${(err as Error).message}`);
  }
}

/** Error codes of a transport that cannot reach the engine. */
const UNREACHABLE = new Set([
  'ECONNREFUSED',
  'ENOENT',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'ENOTFOUND',
  'ABORT_ERR',
  'ERR_STREAM_PREMATURE_CLOSE',
]);

/** Docker-modem error shape (`buildPayload`): statusCode, reason, json. */
interface ModemError {
  statusCode?: number;
  reason?: string;
  json?: { message?: string } | null;
  code?: string;
  message?: string;
  name?: string;
  /** A failed connect's target (a socket path or an IP), with `port` for TCP: names the engine. */
  address?: string;
  port?: number;
}

/** True when the error says the engine itself could not be reached (not an API refusal). */
export function isUnreachable(err: unknown): boolean {
  if (err instanceof ExecServerError) return err.code === 'EXEC_ERR_BACKEND_UNAVAILABLE';
  const e = err as ModemError | undefined;
  if (e === undefined || e === null) return false;
  if (e.statusCode !== undefined) return false;
  return (
    (e.code !== undefined && UNREACHABLE.has(e.code)) ||
    e.name === 'AbortError' ||
    /socket hang up/i.test(e.message ?? '')
  );
}

/** HTTP status of a docker-modem error, if it is one. */
export function statusOf(err: unknown): number | undefined {
  return (err as ModemError | undefined)?.statusCode;
}

/** Where a connect failed (in a pool of engines, which one), when the error says. */
function at(e: ModemError | undefined): string {
  if (typeof e?.address !== 'string') return '';
  return ` at ${e.address}${typeof e.port === 'number' ? `:${e.port}` : ''}`;
}

/** Maps any error of an engine call to the registry; `what` names the operation for the message. */
export function engineError(err: unknown, what: string): ExecServerError {
  if (err instanceof ExecServerError) return err;
  const e = err as ModemError;
  if (isUnreachable(err)) {
    return execError(
      'EXEC_ERR_BACKEND_UNAVAILABLE',
      `docker engine unavailable (${what}): ${e?.code ?? e?.message ?? String(err)}${at(e)}`,
      { cause: err },
    );
  }
  const detail = e?.json?.message ?? e?.message ?? String(err);
  if (e?.statusCode === 404) return execError('EXEC_ERR_NOT_FOUND', `${what}: ${detail}`, { cause: err });
  return execError('EXEC_ERR_BACKEND', `${what}: ${detail}${pidHint(detail)}`, { cause: err });
}

/**
 * Runs one engine call with a deadline. The call gets an AbortSignal (dockerode passes it to
 * the HTTP request); at the deadline the request is aborted and the promise rejects with
 * EXEC_ERR_BACKEND_UNAVAILABLE, so callers never wait on a wedged engine.
 */
export async function withDeadline<T>(what: string, ms: number, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(execError('EXEC_ERR_BACKEND_UNAVAILABLE', `docker engine did not answer within ${ms} ms (${what})`));
    }, ms);
  });
  try {
    return await Promise.race([run(controller.signal), deadline]);
  } catch (err) {
    throw engineError(err, what);
  } finally {
    clearTimeout(timer);
  }
}
