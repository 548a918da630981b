/** Package entry: the exec-server client SDK (the server itself is started with `exec-server serve`). */
export * from './client/index.ts';
