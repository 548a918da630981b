/**
 * Channels for a child's output whose reads all land in one reused buffer.
 *
 * Why: Node reads a child's `stdio: 'pipe'` into a freshly allocated 64 KiB buffer per read,
 * plus an exact-size copy when the read is shorter. With the output slabs in place those were
 * most of the server's remaining page faults, and in full benchmark runs a 256 MB pipe stream
 * cost our server 0.6-1.2 CPU-s; read through channels, 0.5-0.6 (docs/benchmarks.md).
 * `net.Socket`'s `onread` option reads into a buffer we own, but Node offers it only for
 * sockets we connect ourselves and has no socketpair: so the child's end of each channel is the
 * accepted side of a connection to a private Unix socket (in a directory only we can enter),
 * matched to its reader by a random token the reader sends first.
 * The engine copies what it keeps at once (ProcessSink), so one buffer serves every channel.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execError } from '../../errors.ts';
import { readHead } from './socket-head.ts';

const TOKEN_BYTES = 16;
/** A connection that has not sent its token by then is dropped; an open waits as long at most. */
const HANDSHAKE_MS = 5_000;
/** Every read of every channel lands here; `onData` sees a view valid during the call only. */
const readBuffer = Buffer.allocUnsafeSlow(64 * 1024);

export interface OutputChannel {
  /** Our end: data arrives through `onData`; `end` when every writer has closed it. */
  readonly reader: net.Socket;
  /** The child's end: pass it in `spawn`'s `stdio`, then destroy it here. */
  readonly childEnd: net.Socket;
}

interface Ready extends OutputChannel {
  /** Where the reader's data goes: set by `open`, nothing arrives before (no writer yet). */
  readonly target: { onData: (data: Buffer) => void };
}

/** Closes both ends of a channel nobody will use. */
function destroyChannel(c: OutputChannel): void {
  c.reader.destroy();
  c.childEnd.destroy();
}

/** Channels kept connected ahead of need: a spawn then pays no handshake (about 0.3 ms each). */
const READY = 4;

export class OutputChannels {
  readonly #dir: string;
  readonly #server: net.Server;
  readonly #waiting = new Map<string, (socket: net.Socket) => void>();
  readonly #ready: Ready[] = [];
  #connecting = 0;
  #closed = false;

  private constructor(dir: string, server: net.Server) {
    this.#dir = dir;
    this.#server = server;
    server.on('connection', (socket) => this.#accept(socket));
  }

  /** The listener's socket (in a directory only this process's user can enter). */
  get socketPath(): string {
    return join(this.#dir, 'channels.sock');
  }

  /** Listens in a new private directory; rejects when Unix sockets cannot be used here. */
  static async create(): Promise<OutputChannels> {
    const dir = await mkdtemp(join(tmpdir(), 'exec-server-out-')); // mode 0700
    const server = net.createServer({ pauseOnConnect: true });
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(join(dir, 'channels.sock'), () => resolve());
      });
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    const channels = new OutputChannels(dir, server);
    channels.#refill();
    return channels;
  }

  /** A connected channel; `onData` gets every read (a view of a shared buffer: copy to keep). */
  async open(onData: (data: Buffer) => void): Promise<OutputChannel> {
    let channel = this.#ready.pop();
    this.#refill();
    if (!channel || channel.reader.destroyed || channel.childEnd.destroyed) channel = await this.#connect();
    channel.target.onData = onData;
    return channel;
  }

  #refill(): void {
    while (!this.#closed && this.#ready.length + this.#connecting < READY) {
      this.#connecting++;
      this.#connect().then(
        (c) => {
          this.#connecting--;
          if (this.#closed) destroyChannel(c);
          else this.#ready.push(c);
        },
        () => {
          // Counted as given up: the next open connects itself (and fails clearly if it must).
          this.#connecting--;
        },
      );
    }
  }

  #connect(): Promise<Ready> {
    const token = randomBytes(TOKEN_BYTES);
    const key = token.toString('hex');
    const target = { onData: (_data: Buffer): void => undefined };
    return new Promise((resolve, reject) => {
      const reader = net.connect({
        path: this.socketPath,
        onread: {
          buffer: readBuffer,
          callback: (n: number) => {
            target.onData(readBuffer.subarray(0, n));
            return true;
          },
        },
      });
      const timer = setTimeout(
        () => fail(execError('EXEC_ERR_BACKEND', 'output channel: no answer from the listener')),
        HANDSHAKE_MS,
      );
      const fail = (err: Error): void => {
        clearTimeout(timer);
        this.#waiting.delete(key);
        reader.destroy();
        reject(err);
      };
      reader.once('error', fail);
      this.#waiting.set(key, (childEnd) => {
        clearTimeout(timer);
        reader.off('error', fail);
        reader.on('error', () => undefined); // the owner listens once it has the channel
        resolve({ reader, childEnd, target });
      });
      reader.write(token);
    });
  }

  #accept(socket: net.Socket): void {
    const drop = (): void => {
      socket.destroy();
    };
    socket.on('error', drop);
    readHead(socket, TOKEN_BYTES, HANDSHAKE_MS, (token, rest) => {
      const key = token.toString('hex');
      const claim = this.#waiting.get(key);
      if (!claim || rest.length > 0) {
        drop();
        return;
      }
      this.#waiting.delete(key);
      claim(socket);
    });
    socket.resume();
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const c of this.#ready.splice(0)) destroyChannel(c);
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await rm(this.#dir, { recursive: true, force: true });
  }
}
