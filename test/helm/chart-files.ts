/**
 * The Helm chart's files as the static chart tests (chart.test.ts, chart-templates.test.ts) read
 * them: values.yaml parsed, and the templates' text by file name.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

export const root = fileURLToPath(new URL('../../', import.meta.url));
export const chartDir = join(root, 'helm', 'exec-server');
const templatesDir = join(chartDir, 'templates');
export const read = (path: string): string => readFileSync(path, 'utf8');

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

export const values = parse(read(join(chartDir, 'values.yaml'))) as Record<string, Json>;
const templateFiles = readdirSync(templatesDir)
  .filter((f) => /\.(ya?ml|tpl|txt)$/.test(f))
  .sort();
/** Every template's text, by file name. */
export const templates = new Map(templateFiles.map((f) => [f, read(join(templatesDir, f))]));
/** The text of templates/`name` (which must exist). */
export const template = (name: string): string => {
  const text = templates.get(name);
  assert.ok(text !== undefined, `templates/${name} exists`);
  return text;
};
