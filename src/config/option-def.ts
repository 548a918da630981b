/** One option of the server's option table: its flag, variable, kind, default and bounds. */

export type Kind = 'string' | 'int' | 'bool' | 'enum';

/** One option of the table: its flag, variable, kind, default, description and bounds. */
export interface OptionDef {
  readonly flag: string;
  readonly env: string;
  readonly kind: Kind;
  readonly default: string | number | boolean | undefined;
  readonly description: string;
  readonly values?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  readonly secret?: boolean;
}
