/** The exec-server TypeScript SDK. Its wire types are the server's own (src/protocol/), exported as `protocol`. */
export {
  DEFAULT_CONNECT_TIMEOUT_MS,
  DRAIN_CLOSE_CODE,
  ExecServerClient,
  type ApprovalDecision,
  type ApprovalRequest,
  type ConnectOptions,
  type ExecOptions,
  type ImagePull,
  type ProcessSummary,
} from './client.ts';
export { ExecHandle, type ExecResult, type OutputChunk, type StreamName } from './process-handle.ts';
export {
  CommandExitError,
  ExecServerConnectionError,
  ExecServerHttpError,
  HandleDisconnectedError,
  StdinClosedError,
  WaitTimeoutError,
} from './errors.ts';
export { HttpApi, httpBaseOf, wsUrlOf, type SessionInfo, type SessionSpec, type SnapshotInfo } from './http.ts';
export { RpcConnection, RpcError, type Notification } from './rpc-connection.ts';
export type { ProcessId, SessionId } from '../ids.ts';
export { asProcessId, asSessionId } from '../ids.ts';
export * as files from './files.ts';
export * as protocol from '../protocol/index.ts';
export type { MethodName, MethodParams, MethodResult } from '../protocol/index.ts';
