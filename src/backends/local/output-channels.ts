/**
 * Channels for a child's output whose reads all land in one reused buffer.
 *
 * Why: Node reads a child's `stdio: 'pipe'` into a freshly allocated 64 KiB buffer per read,
 * plus an exact-size copy when the read is shorter. With the output slabs in place those were
 * most of the server's remaining page faults, and in full benchmark runs a 256 MB pipe stream
 * cost our server 0.6-1.2 CPU-s; read through channels, 0.5-0.6 (docs/benchmarks.md).
 * `net.Socket`'s `onread` option reads into a buffer we own, but Node offers it only for
 * sockets we connect ourselves and has no socketpair: so the child's end of each channel is the
 * accepted side of a connection to a private Unix socket, matched to its reader by a random
 * token the reader sends first (private-listener.ts).
 * The engine copies what it keeps at once (ProcessSink), so one buffer serves every channel.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { execError } from '../../errors.ts';
import { PrivateListener, type TokenClaims } from './private-listener.ts';

const TOKEN_BYTES = 16;
/** A connection that has not sent its token by then is dropped; an open waits as long at most. */
const HANDSHAKE_MS = 5_000;
/** Every read of every channel lands here; `onData` sees a view valid during the call only. */
const readBuffer = Buffer.allocUnsafeSlow(64 * 1024);

/** One output stream of a child: our reading end and the end the child writes to. */
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

/** Makes output channels over the private listener, a few kept ready ahead of the next spawn. */
export class OutputChannels {
  readonly #listener: PrivateListener;
  readonly #waiting: TokenClaims;
  readonly #ready: Ready[] = [];
  #connecting = 0;
  #closed = false;

  private constructor(listener: PrivateListener, waiting: TokenClaims) {
    this.#listener = listener;
    this.#waiting = waiting;
  }

  /** The listener's socket (in a directory only this process's user can enter). */
  get socketPath(): string {
    return this.#listener.path;
  }

  /** Listens in a new private directory; rejects when Unix sockets cannot be used here. */
  static async create(): Promise<OutputChannels> {
    const waiting: TokenClaims = new Map();
    const listener = await PrivateListener.open('exec-server-out-', waiting, TOKEN_BYTES, HANDSHAKE_MS);
    const channels = new OutputChannels(listener, waiting);
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
    const key = token.toString('latin1');
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
      this.#waiting.set(key, (childEnd, rest) => {
        // Only the token comes before the child has its end: anything more is not our reader's.
        if (rest.length > 0) return void childEnd.destroy();
        clearTimeout(timer);
        reader.off('error', fail);
        reader.on('error', () => undefined); // the owner listens once it has the channel
        resolve({ reader, childEnd, target });
      });
      reader.write(token);
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const c of this.#ready.splice(0)) destroyChannel(c);
    await this.#listener.close();
  }
}
