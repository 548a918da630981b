/**
 * The scanners behind scripts/check-size.mjs: where the functions of a TypeScript/JavaScript
 * file and of a C file begin and end. Each gives `{ name, first, last, testCase? }`, the
 * 0-based lines of a function's signature and of its closing brace.
 *
 * There is no TypeScript parser among the dependencies (TypeScript 7 is a native binary), so
 * esbuild strips the types and compiles JSX, a small scanner finds the functions of the plain
 * JavaScript it gives, and its source map takes their first and last lines back to the file.
 * C needs no compiler: the native sources keep every top-level function in one shape (see
 * {@link cFunctions}).
 */
import { transformSync } from 'esbuild';
import { vlqFields } from '../coverage-report.mjs';

/** Per generated line, its segments `[generated column, original line]` (source map v3 mappings). */
function decodeMappings(mappings) {
  const lines = [];
  let origLine = 0;
  for (const text of mappings.split(';')) {
    const segs = [];
    let col = 0;
    for (const seg of text.split(',')) {
      if (seg === '') continue;
      const fields = vlqFields(seg);
      col += fields[0] ?? 0;
      if (fields.length >= 4) {
        origLine += fields[2];
        segs.push([col, origLine]);
      }
    }
    lines.push(segs);
  }
  return lines;
}

/** The original line (0-based) of a generated position: the nearest mapping at or before it. */
function originalLine(map, line, col) {
  for (let l = line; l >= 0; l--) {
    const segs = map[l] ?? [];
    for (let i = segs.length - 1; i >= 0; i--) if (l < line || segs[i][0] <= col) return segs[i][1];
  }
  return 0;
}

const NOT_A_FUNCTION = new Set(['if', 'for', 'while', 'switch', 'catch', 'with', 'return', 'typeof', 'await']);
const REGEX_AFTER = new Set(
  '( , = : [ ! & | ? { } ; + - * % < > ~ ^ => return typeof case do else in of new delete void throw yield await'.split(' '),
);

/**
 * The callees whose function arguments are test cases or suites (`describe`, `test`, `it`,
 * `suite`, their `.only`/`.skip`/`.todo`, and subtests such as `t.test`).
 */
const TEST_CALLEE = /^(?:[\w$]+\.)?(?:describe|suite|test|it)(?:\.(?:only|skip|todo))?$/;

/** A cursor over JavaScript source that turns it into tokens `{ t, line, col }`. */
function lexer(code) {
  const s = { code, i: 0, line: 0, lineStart: 0, depth: 0, out: [], templates: [] };
  s.push = (t, at) => s.out.push({ t, line: s.line, col: at - s.lineStart });
  s.newline = (at) => {
    s.line++;
    s.lineStart = at + 1;
  };
  return s;
}

/** Skips a template literal's text up to its end or its next `${`. */
function templateText(s) {
  const { code } = s;
  while (s.i < code.length) {
    const c = code[s.i];
    if (c === '\\') s.i += 2;
    else if (c === '`') {
      s.i++;
      return;
    } else if (c === '$' && code[s.i + 1] === '{') {
      s.i += 2;
      s.templates.push(s.depth);
      s.depth++;
      return;
    } else {
      if (c === '\n') s.newline(s.i);
      s.i++;
    }
  }
}

/** Reads a string or regex literal (its opening character is at `s.i`) as one token. */
function literal(s, kind) {
  const { code } = s;
  const quote = code[s.i];
  s.push(kind, s.i);
  s.i++;
  if (kind === 'str') {
    while (s.i < code.length && code[s.i] !== quote) s.i += code[s.i] === '\\' ? 2 : 1;
    s.i++;
    return;
  }
  let inClass = false;
  while (s.i < code.length && (inClass || code[s.i] !== '/')) {
    if (code[s.i] === '\\') s.i++;
    else if (code[s.i] === '[') inClass = true;
    else if (code[s.i] === ']') inClass = false;
    s.i++;
  }
  s.i++;
  while (/[a-z]/.test(code[s.i] ?? '')) s.i++;
}

/** Reads what starts at `s.i` that is not white space, a comment or a literal. */
function punctuationOrWord(s) {
  const { code } = s;
  const c = code[s.i];
  if (/[A-Za-z_$0-9]/.test(c)) {
    const start = s.i;
    while (s.i < code.length && /[A-Za-z_$0-9.]/.test(code[s.i])) s.i++;
    s.push(code.slice(start, s.i), start);
  } else if (c === '=' && code[s.i + 1] === '>') {
    s.push('=>', s.i);
    s.i += 2;
  } else if (c === '}' && s.templates.length > 0 && s.templates[s.templates.length - 1] === s.depth - 1) {
    s.depth--;
    s.templates.pop();
    s.i++;
    templateText(s);
  } else {
    if (c === '{') s.depth++;
    if (c === '}') s.depth--;
    s.push(c, s.i);
    s.i++;
  }
}

/** Tokens of plain JavaScript: `{ t, line, col }`; strings, templates, comments and regexes as one token. */
function tokenize(code) {
  const s = lexer(code);
  while (s.i < code.length) {
    const c = code[s.i];
    const last = s.out[s.out.length - 1];
    if (c === '\n') {
      s.newline(s.i);
      s.i++;
    } else if (c === ' ' || c === '\t' || c === '\r') s.i++;
    else if (c === '/' && code[s.i + 1] === '/') {
      while (s.i < code.length && code[s.i] !== '\n') s.i++;
    } else if (c === '/' && code[s.i + 1] === '*') {
      const end = code.indexOf('*/', s.i + 2);
      for (let k = s.i; k < end; k++) if (code[k] === '\n') s.newline(k);
      s.i = end + 2;
    } else if (c === '"' || c === "'") literal(s, 'str');
    else if (c === '`') {
      s.push('str', s.i);
      s.i++;
      templateText(s);
    } else if (c === '/' && (last === undefined || REGEX_AFTER.has(last.t))) literal(s, 're');
    else punctuationOrWord(s);
  }
  return s.out;
}

/** Matching brackets (both ways) and, per token, the bracket it is directly inside. */
function brackets(tokens) {
  const match = new Map();
  const parent = [];
  const stack = [];
  tokens.forEach((tok, k) => {
    parent.push(stack[stack.length - 1]);
    if (tok.t === '(' || tok.t === '[' || tok.t === '{') stack.push(k);
    else if (tok.t === ')' || tok.t === ']' || tok.t === '}') {
      const open = stack.pop();
      if (open !== undefined) {
        match.set(k, open);
        match.set(open, k);
      }
    }
  });
  return { match, parent };
}

/** The last token of an arrow function's expression body starting at `k`. */
function expressionEnd(tokens, k) {
  let d = 0;
  let end = k;
  for (; end < tokens.length; end++) {
    const t = tokens[end].t;
    if (t === '(' || t === '[' || t === '{') d++;
    else if (t === ')' || t === ']' || t === '}') {
      if (d === 0) break;
      d--;
    } else if ((t === ',' || t === ';') && d === 0) break;
  }
  return end - 1;
}

/** The functions in `tokens`: `{ name, start, end, testCase }` with the tokens of their start and end. */
function functionsOf(tokens) {
  const { match, parent } = brackets(tokens);
  const paramsStart = (k) => {
    const start = tokens[k]?.t === ')' ? (match.get(k) ?? k) : k;
    return tokens[start - 1]?.t === 'async' ? start - 1 : start;
  };
  const assignedName = (start) =>
    ['=', ':'].includes(tokens[start - 1]?.t) ? (tokens[start - 2]?.t ?? '(anonymous)') : '(anonymous)';
  // An argument of a call such as `test('name', async () => { ... })`.
  const testCase = (start) => {
    const open = parent[start];
    return open !== undefined && tokens[open].t === '(' && TEST_CALLEE.test(tokens[open - 1]?.t ?? '');
  };
  const found = [];
  tokens.forEach((tok, k) => {
    const prev = tokens[k - 1];
    if (prev === undefined) return;
    if (tok.t === '{' && prev.t === ')') {
      const open = match.get(k - 1);
      const before = open === undefined ? undefined : tokens[open - 1];
      if (before === undefined || NOT_A_FUNCTION.has(before.t)) return;
      const name = before.t === 'function' ? assignedName(open - 1) : before.t;
      found.push({ name, start: before, end: tokens[match.get(k)] ?? tok, testCase: testCase(open - 1) });
    } else if (prev.t === '=>') {
      const start = paramsStart(k - 2);
      const end = tok.t === '{' ? match.get(k) : expressionEnd(tokens, k);
      const name = assignedName(start);
      found.push({ name, start: tokens[start] ?? tok, end: tokens[end] ?? tok, testCase: testCase(start) });
    }
  });
  return found;
}

/**
 * The functions of a TypeScript or JavaScript file (declarations, methods, arrows, function
 * expressions): `{ name, first, last, testCase }`, `testCase` for a function passed straight to
 * describe/test/it.
 */
export function scriptFunctions(file, text) {
  const loader = /\.[cm]?jsx?$/.test(file) ? 'js' : file.endsWith('x') ? 'tsx' : 'ts';
  const { code, map } = transformSync(text, {
    loader,
    jsx: 'automatic',
    sourcemap: 'external',
    sourcefile: file,
    target: 'esnext',
  });
  const mappings = decodeMappings(JSON.parse(map).mappings);
  return functionsOf(tokenize(code)).map((f) => ({
    name: f.name,
    first: originalLine(mappings, f.start.line, f.start.col),
    last: originalLine(mappings, f.end.line, f.end.col),
    testCase: f.testCase,
  }));
}

/** A C signature that is not a function: a type definition or an initializer. */
const NOT_C_FUNCTION = /^(?:typedef|extern\s+"C")\b|=/;

/**
 * The top-level functions of a C file. One starts at a line in column 0 that opens a parameter
 * list and ends with `{`, or whose signature does after more lines of parameters (or whose
 * next line is a lone `{`); it ends at the next line that is exactly `}`. Type definitions and
 * initializers (`typedef`, `struct x {`, `= {`) have no parameter list or have a `=`.
 */
export function cFunctions(text) {
  const lines = text.split('\n');
  const found = [];
  for (let i = 0; i < lines.length; i++) {
    if (!/^[A-Za-z_]/.test(lines[i]) || !lines[i].includes('(')) continue;
    let sig = '';
    let open = -1;
    for (let j = i; j < lines.length && j < i + 20; j++) {
      // A parameter list goes on indented; a blank line or a new declaration ends the search.
      if (j > i && (lines[j].trim() === '' || /^\S/.test(lines[j]))) break;
      sig += `${lines[j].trimEnd()} `;
      if (sig.trimEnd().endsWith(';')) break;
      if (sig.trimEnd().endsWith('{')) open = j;
      else if (lines[j + 1] === '{' && balanced(sig)) open = j + 1;
      if (open >= 0) break;
    }
    if (open < 0 || NOT_C_FUNCTION.test(sig)) continue;
    let close = open + 1;
    while (close < lines.length && lines[close].trimEnd() !== '}') close++;
    if (close >= lines.length) break;
    found.push({ name: /([A-Za-z_]\w*)\s*\(/.exec(sig)?.[1] ?? '(anonymous)', first: i, last: close });
    i = close;
  }
  return found;
}

/** Whether every `(` in `text` is closed. */
function balanced(text) {
  let d = 0;
  for (const c of text) d += c === '(' ? 1 : c === ')' ? -1 : 0;
  return d === 0;
}
