/** Client subcommands (filled in by the CLI work). */
export async function runCli(command: string, _args: string[]): Promise<number> {
  process.stderr.write(`exec-server: unknown command ${JSON.stringify(command)}; try --help\n`);
  return 2;
}
