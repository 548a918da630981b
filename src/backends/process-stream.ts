/**
 * A backend process as a byte stream: what is written goes to its stdin, its stdout is what is
 * read. Port forwarding (preview ports) runs a relay this way inside the session, so a port is
 * reached through the same path commands take, without granting the session any network.
 */
import { Duplex } from 'node:stream';
import type { BackendProcess, ProcessSink, SpawnRequest } from './types.ts';
import { execError } from '../errors.ts';

/** The relay's stderr kept for the error message (its last bytes). */
const STDERR_KEEP = 2048;

export type Spawner = (request: SpawnRequest, sink: ProcessSink) => Promise<BackendProcess>;

/**
 * Starts `request` (a pipe-mode relay) and resolves with its stream. The stream ends when the
 * relay exits with 0; a non-zero exit destroys it with the relay's stderr as the error; a
 * destroyed stream kills the relay's process group.
 */
export async function processStream(spawn: Spawner, request: SpawnRequest): Promise<Duplex> {
  let proc: BackendProcess | undefined;
  let exited = false;
  let stderr = '';
  const stream = new Duplex({
    read() {
      proc?.resumeOutput();
    },
    write(chunk: Buffer, _encoding, callback) {
      const p = proc;
      if (!p) return callback(execError('EXEC_ERR_BACKEND', 'port relay not started'));
      // The stream's source may be far faster than the relay (a download into a session): the
      // write waits for room in the relay's stdin budget, which also holds the source back.
      (p.stdinRoom?.(chunk.length) ?? Promise.resolve()).then(() => p.write(chunk)).then(() => callback(), callback);
    },
    final(callback) {
      if (!proc) return callback();
      proc.closeStdin().then(() => callback(), callback);
    },
    destroy(err, callback) {
      if (!exited) proc?.signal('SIGKILL').catch(() => {});
      callback(err);
    },
  });
  const sink: ProcessSink = {
    output(name, data) {
      if (name === 'stderr') {
        stderr = (stderr + data.toString('utf8')).slice(-STDERR_KEEP);
        return;
      }
      if (!stream.push(Buffer.from(data))) proc?.pauseOutput();
    },
    exit(result) {
      exited = true;
      if (result.kind === 'exited' && result.code === 0) {
        stream.push(null);
        return;
      }
      const how =
        result.kind === 'exited'
          ? `exited with ${result.code}`
          : result.kind === 'signaled'
            ? `killed by ${result.signal}`
            : `lost: ${result.reason}`;
      stream.destroy(execError('EXEC_ERR_BACKEND', stderr.trim() || `port relay ${how}`));
    },
  };
  // The relay may fail before its caller holds the stream (nothing listens at the port: it
  // exits at once), and an error event nobody hears ends the process. The error stays readable
  // as `stream.errored` for a caller that comes after it; listeners added in time still get it.
  stream.on('error', () => undefined);
  proc = await spawn(request, sink);
  return stream;
}
