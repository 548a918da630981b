/** The docker backend: `createDockerBackend(options, log)`. */
export { createDockerBackend, type DockerBackend } from './docker-backend.ts';
export { createDockerEngines, engineList } from './engine-pool.ts';
export { checkHostPids } from './engine/host-pids.ts';
export type { DockerBackendOptions, DockerLogger } from './options.ts';
export { agentWindowFor } from './options.ts';
export { KEPT_CAPABILITIES } from './container/container-config.ts';
