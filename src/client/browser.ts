/**
 * The SDK's browser entry (`exec-server/client` under a bundler's `browser` condition): what
 * runs without Node built-ins. The REST API (`HttpApi`: sessions, snapshots, the tool facade,
 * over `fetch`), the errors, the branded ids and the protocol module (types and schemas).
 * `ExecServerClient`, the streaming WebSocket client, and the file helpers need Node (`ws`,
 * streams, Buffer) and are only in the Node entry.
 */
export { CommandExitError, ExecServerConnectionError, ExecServerHttpError } from './errors.ts';
export { HttpApi, httpBaseOf, wsUrlOf, type SessionInfo, type SessionSpec, type SnapshotInfo } from './http.ts';
export type { ProcessId, SessionId } from '../ids.ts';
export { asProcessId, asSessionId } from '../ids.ts';
export * as protocol from '../protocol/index.ts';
export type {
  ApprovalDecision,
  ApprovalRequest,
  ImagePull,
  MethodName,
  MethodParams,
  MethodResult,
  NotificationName,
  NotificationParams,
  ProcessSummary,
  ServerNotification,
  StreamName,
} from '../protocol/index.ts';
