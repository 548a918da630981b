/** `fs/*` methods (filled in by the filesystem work). */
import type { Connection } from '../connection.ts';
import type { MethodTable } from '../method-table.ts';

export function registerFsMethods(_table: MethodTable<Connection>): void {}
