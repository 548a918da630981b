/** Codex's pruning rule (src/processes/pruning.ts): the 8 most recent are safe; ended ones go before live ones. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PRUNE_PROTECTED, pruneVictim } from '../../src/processes/pruning.ts';

const entries = (n: number) => Array.from({ length: n }, (_, i) => ({ id: i, lastUsed: 1000 + i, ended: false }));

test('no victim while every entry is among the protected most recent', () => {
  assert.equal(PRUNE_PROTECTED, 8);
  assert.equal(
    pruneVictim(entries(8), () => true),
    undefined,
  );
});

test('the least recently used ended entry goes first, else the least recently used that may end', () => {
  const list = entries(12);
  assert.equal(pruneVictim(list, (e) => e.ended)?.id, 0);
  list[2]!.ended = true;
  assert.equal(pruneVictim(list, (e) => e.ended)?.id, 2);
  list[11]!.ended = true; // ended but protected (most recent)
  list[2]!.ended = false;
  assert.equal(pruneVictim(list, (e) => e.ended)?.id, 0);
  assert.equal(
    pruneVictim(
      list,
      (e) => e.ended,
      (e) => e.id >= 3,
    )?.id,
    3,
  );
  assert.equal(
    pruneVictim(
      list,
      () => false,
      () => false,
    ),
    undefined,
  );
});

test('order comes from lastUsed, not from the list order, and the input is left as it was', () => {
  const list = entries(10).reverse();
  const before = list.map((e) => e.id);
  assert.equal(pruneVictim(list, () => false)?.id, 0);
  assert.deepEqual(
    list.map((e) => e.id),
    before,
  );
});
