/**
 * A name for the sandbox user inside a local sandbox.
 *
 * A root server's sandboxed commands run as a uid of their own (sandbox-users.ts) that the
 * host's /etc/passwd does not list: `id -un` failed, bash prompted `I have no name!`, and tools
 * that look their user up (ssh, git's author fallback, Python's getpass) refused to work. The
 * session gets copies of the host's /etc/passwd and /etc/group with one entry more for its
 * user, named as the docker backend's sandbox user is (`sandbox`), its home the workspace, and
 * bubblewrap binds them read-only over the originals (bubblewrap.ts). The copies live beside
 * the session's private /tmp, in a directory the sandbox user cannot write.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { posix } from 'node:path';

/** The account files one sandbox sees instead of the host's. */
export interface SandboxAccounts {
  readonly dir: string;
  readonly passwd: string;
  readonly group: string;
}

/** The name the sandbox user gets (the docker backend's images call theirs the same). */
export const SANDBOX_USER_NAME = 'sandbox';

function listsId(text: string, id: number): boolean {
  return text.split('\n').some((line) => line.split(':')[2] === String(id));
}

function withEntry(text: string, entry: string): string {
  return `${text}${text === '' || text.endsWith('\n') ? '' : '\n'}${entry}\n`;
}

/**
 * Writes the account files into `dir` (made, mode 0755: the sandbox user must read them, not
 * write), or undefined where the host already names the user and its group.
 */
export async function writeSandboxAccounts(
  dir: string,
  user: { uid: number; gid: number },
  home: string,
  shell: string,
): Promise<SandboxAccounts | undefined> {
  const [passwd, group] = await Promise.all([
    readFile('/etc/passwd', 'utf8').catch(() => ''),
    readFile('/etc/group', 'utf8').catch(() => ''),
  ]);
  const needUser = !listsId(passwd, user.uid);
  const needGroup = !listsId(group, user.gid);
  if (!needUser && !needGroup) return undefined;
  await mkdir(dir, { recursive: true, mode: 0o755 });
  const accounts = { dir, passwd: posix.join(dir, 'passwd'), group: posix.join(dir, 'group') };
  const name = SANDBOX_USER_NAME;
  await Promise.all([
    writeFile(
      accounts.passwd,
      needUser ? withEntry(passwd, `${name}:x:${user.uid}:${user.gid}:${name}:${home}:${shell}`) : passwd,
      { mode: 0o644 },
    ),
    writeFile(accounts.group, needGroup ? withEntry(group, `${name}:x:${user.gid}:`) : group, { mode: 0o644 }),
  ]);
  return accounts;
}

/** Removes the account files of a session that ended. */
export async function removeSandboxAccounts(accounts: SandboxAccounts | undefined): Promise<void> {
  if (accounts) await rm(accounts.dir, { recursive: true, force: true });
}
