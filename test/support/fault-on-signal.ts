/**
 * Preloaded (`--import`) into a server a test runs as a child process: SIGWINCH throws an error
 * nobody catches, the fault main.ts's shutdown handles as fatal. Only tests load this.
 */
process.on('SIGWINCH', () => {
  setImmediate(() => {
    throw new Error('fault injected by the test');
  });
});
