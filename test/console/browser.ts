/**
 * Headless Chromium for the console tests: Debian's `chromium` driven by playwright-core
 * (no browser download). Under CI=true a missing browser is a failure, elsewhere a skip with
 * the reason. The console bundle is built first when the checkout has none.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Browser, Locator, Page } from 'playwright-core';
import { CONSOLE_BUILD_DIR } from '../../src/console/routes.ts';

const run = promisify(execFile);
export const CHROMIUM = process.env.EXEC_SERVER_CHROMIUM ?? '/usr/bin/chromium';
const IN_CI = process.env.CI === 'true' || process.env.CI === '1';

const missing = existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing (Debian: apt-get install chromium)`;
if (missing && IN_CI) {
  test('chromium is available (required under CI=true)', () => {
    throw new Error(missing);
  });
}

/** Options for the browser tests: skipped outside CI when there is no browser. */
export function browserTestOptions(timeout: number, extraSkip?: string): { skip?: string; timeout: number } {
  const skip = missing ? (IN_CI ? 'chromium missing: see the failing test' : missing) : extraSkip;
  return skip === undefined ? { timeout } : { skip, timeout: 1000 };
}

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(full) : statSync(full).mtimeMs);
  }
  return newest;
}

/** Builds the console bundle when the checkout has none or web/ changed since (the tests must see the code they test). */
export async function ensureConsoleBuilt(): Promise<void> {
  const index = join(CONSOLE_BUILD_DIR, 'index.html');
  const web = fileURLToPath(new URL('../../web/', import.meta.url));
  if (existsSync(index) && statSync(index).mtimeMs >= newestMtime(web)) return;
  await run(process.execPath, [join(web, 'build.mjs')], { timeout: 120_000 });
}

export async function launch(): Promise<Browser> {
  // Loaded here, not at import: its module evaluation is heavy, and at import time it would
  // delay the docker tests' engine ping (test/docker/engine.ts) on a busy machine.
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-dev-shm-usage',
      '--no-first-run',
      '--disable-extensions',
      '--disable-sync',
      '--mute-audio',
    ],
  });
}

/** Where screenshots go: EXEC_SERVER_CONSOLE_SCREENSHOTS (docs/console/ for the committed ones) or a temp dir. */
const SHOTS = process.env.EXEC_SERVER_CONSOLE_SCREENSHOTS ?? join(tmpdir(), 'exec-server-console-screenshots');

export async function screenshot(page: Page, name: string): Promise<string> {
  await mkdir(SHOTS, { recursive: true });
  const path = join(SHOTS, `${name}.png`);
  await page.screenshot({ path });
  return path;
}

/**
 * Collects the page's uncaught exceptions and CSP violations. Failed requests the console
 * expects (a 401 at sign-in, a 404 for another tenant's session) are not errors here.
 */
export function pageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) errors.push(`csp: ${m.text()}`);
  });
  return errors;
}

/** An element's text, as the DOM has it (its text nodes; an element's is never null). */
export async function textOf(locator: Locator): Promise<string> {
  return (await locator.textContent()) ?? '';
}

/** The terminal's visible text (xterm's DOM rows, one a line), with non-breaking spaces as spaces. */
export async function terminalText(page: Page): Promise<string> {
  return (await page.locator('.xterm-rows > div').allTextContents()).join('\n').replace(/\u00a0/g, ' ');
}
