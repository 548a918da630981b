/** Client subcommands, built on the SDK: run, shell, sessions, cp; mcp (the MCP endpoint on stdio). */
import { cpCommand } from './cp.ts';
import { runCommand } from './run.ts';
import { sessionsCommand } from './sessions.ts';
import { shellCommand } from './shell.ts';

/** Runs a client command by name; an unknown one is a usage error (exit 2). */
export async function runCli(command: string, args: string[]): Promise<number> {
  switch (command) {
    case 'run':
      return runCommand(args);
    case 'shell':
      return shellCommand(args);
    case 'sessions':
      return sessionsCommand(args);
    case 'cp':
      return cpCommand(args);
    case 'audit':
      return (await import('../audit/verify.ts')).auditCommand(args);
    case 'mcp':
      return (await import('./mcp.ts')).mcpCommand(args);
    default:
      process.stderr.write(`exec-server: unknown command ${JSON.stringify(command)}; try --help\n`);
      return 2;
  }
}
