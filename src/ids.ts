/**
 * Branded identifiers: a session id can never be passed where a process id is expected.
 * The brands exist only at compile time; on the wire they are plain strings.
 */
declare const brand: unique symbol;
type Brand<T, B extends string> = T & { readonly [brand]: B };

/** Server-assigned session id (UUID). */
export type SessionId = Brand<string, 'SessionId'>;
/** Client-chosen process id, scoped to one session. */
export type ProcessId = Brand<string, 'ProcessId'>;
/** Docker container id. */
export type ContainerId = Brand<string, 'ContainerId'>;
/** Tenant name from the token table; `default` when a single token (or none) is configured. */
export type TenantId = Brand<string, 'TenantId'>;

/** Brands a string known to be a session id (the only place such a cast is written). */
export const asSessionId = (s: string): SessionId => s as SessionId;
/** Brands a string known to be a process id. */
export const asProcessId = (s: string): ProcessId => s as ProcessId;
/** Brands a string known to be a container id. */
export const asContainerId = (s: string): ContainerId => s as ContainerId;
/** Brands a string known to be a tenant name. */
export const asTenantId = (s: string): TenantId => s as TenantId;
