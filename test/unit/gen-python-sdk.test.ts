/**
 * The Python SDK's generated module (scripts/gen-python-sdk.ts): the committed
 * clients/python/exec_server/_generated.py is what the generator writes from src/ now, and the
 * schema walker spells each TypeBox form as the Python type it is.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { Type } from 'typebox';
import { PY_TYPES, PythonTypes, render } from '../../scripts/gen-python-sdk.ts';
import { OneOf, Opt } from '../../src/protocol/index.ts';

const GENERATED = new URL('../../clients/python/exec_server/_generated.py', import.meta.url);

test('the committed _generated.py is what the generator writes from the protocol now', () => {
  assert.equal(readFileSync(GENERATED, 'utf8'), render(), 'out of date: node --import tsx scripts/gen-python-sdk.ts');
});

test('every listed wire type is declared once, under its name', () => {
  const text = render();
  for (const [name] of PY_TYPES) {
    const declared = text.match(new RegExp(`^(?:class ${name}\\(TypedDict\\):|${name}: TypeAlias = )`, 'gm'));
    assert.equal(declared?.length, 1, name);
  }
});

test('each TypeBox form becomes its Python type, with the wire keys as they are', () => {
  const Tag = OneOf(['on', 'off']);
  const Inner = Type.Object({ n: Type.Integer() });
  const Outer = Type.Object({
    camelKey: Type.String(),
    count: Type.Integer(),
    ratio: Type.Number(),
    flag: Type.Optional(Type.Boolean()),
    tag: Tag,
    tagOrNull: Type.Union([Tag, Type.Null()]),
    maybe: Opt(Type.String()),
    labels: Type.Record(Type.String(), Type.String()),
    items: Type.Array(Inner),
    nested: Type.Object({ deep: Type.Optional(Inner) }),
    shape: Type.Union([Type.Object({ kind: Type.Literal('a'), x: Type.Integer() }), Type.Object({ y: Type.String() })]),
    anything: Type.Unknown(),
    one: Type.Literal(true),
  });
  const types = new PythonTypes([
    ['Tag', Tag, 'A tag.'],
    ['Inner', Inner, 'An inner object.'],
    ['Outer', Outer, 'The outer object.'],
  ]);
  assert.deepEqual([...types.typing].sort(), ['Any', 'Literal', 'NotRequired', 'TypeAlias', 'TypedDict']);
  assert.deepEqual(types.blocks, [
    'Tag: TypeAlias = Literal["on", "off"]\n"""A tag."""',
    'class Inner(TypedDict):\n    """An inner object."""\n\n    n: int',
    'class OuterNested(TypedDict):\n    deep: NotRequired[Inner]',
    'class OuterShapeA(TypedDict):\n    kind: Literal["a"]\n    x: int',
    'class OuterShapeY(TypedDict):\n    y: str',
    [
      'class Outer(TypedDict):',
      '    """The outer object."""',
      '',
      '    camelKey: str',
      '    count: int',
      '    ratio: float',
      '    flag: NotRequired[bool]',
      '    tag: Tag',
      '    tagOrNull: Tag | None',
      '    maybe: NotRequired[str | None]',
      '    labels: dict[str, str]',
      '    items: list[Inner]',
      '    nested: OuterNested',
      '    shape: OuterShapeA | OuterShapeY',
      '    anything: Any',
      '    one: Literal[True]',
    ].join('\n'),
  ]);
});

test('what Python cannot declare fails the generator instead of being typed loosely', () => {
  const fails = (schema: Parameters<typeof Type.Object>[0], message: RegExp) =>
    assert.throws(() => new PythonTypes([['T', Type.Object(schema), 'T.']]), message);
  fails({ class: Type.String() }, /T\.class cannot be a TypedDict field/);
  fails({ 'dash-key': Type.String() }, /T\.dash-key cannot be a TypedDict field/);
  fails({ empty: Type.Object({}) }, /TEmpty: an object without properties/);
  fails({ tuple: Type.Tuple([Type.String()]) }, /TTuple: no Python type/);
  const same = Type.Object({ a: Type.String() });
  assert.throws(
    () =>
      new PythonTypes([
        ['A', same, 'A.'],
        ['B', Type.Object({ a: Type.String() }), 'B.'],
      ]),
    /B has the shape of A/,
  );
});
