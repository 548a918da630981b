/**
 * The SDK's shortcut for `process/output` frames (src/client/rpc-connection.ts) gives exactly
 * what JSON.parse gives for the frames it takes, and leaves every other shape to JSON.parse.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { outputNotification } from '../../src/client/rpc-connection.ts';

const chunk = Buffer.from('hello, "world"\n\u00e9\u0000'.repeat(50)).toString('base64');

test('output frames as our server writes them: the same message as JSON.parse', () => {
  for (const head of ['{', '{"jsonrpc":"2.0",']) {
    const text = `${head}"method":"process/output","params":{"processId":"p\\"1\\u00e9","seq":7,"stream":"stderr","chunk":"${chunk}"}}`;
    assert.deepEqual(outputNotification(Buffer.from(text)), JSON.parse(text));
  }
});

test('every other shape is left to the general parser', () => {
  const frames = [
    // Another method, a response, an array.
    `{"method":"process/exited","params":{"processId":"p","seq":2,"exitCode":0}}`,
    `{"id":1,"result":{"chunks":[{"seq":1,"chunk":"${chunk}"}]}}`,
    `[{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"${chunk}"}}]`,
    // The chunk not last, escaped, or the frame cut short.
    `{"method":"process/output","params":{"processId":"p","seq":1,"chunk":"${chunk}","stream":"stdout"}}`,
    `{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"aGk\\/"}}`,
    `{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"${chunk}"`,
    // A head that is not JSON.
    `{"method":"process/output",,"params":{"chunk":"${chunk}"}}`,
  ];
  for (const f of frames) assert.equal(outputNotification(Buffer.from(f)), undefined, f.slice(0, 80));
});
