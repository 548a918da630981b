/** The configuration's error: a registry error (EXEC_ERR_CONFIG) whose message names the option. */
import { ExecServerError } from '../errors.ts';

/** A configuration error: the message names the option and what was wrong (at boot: exit 2). */
export class ConfigError extends ExecServerError<'EXEC_ERR_CONFIG'> {
  override readonly name: string = 'ConfigError';

  constructor(message: string, options?: { cause?: unknown }) {
    super('EXEC_ERR_CONFIG', message, options);
  }
}
