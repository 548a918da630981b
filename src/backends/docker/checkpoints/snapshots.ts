/**
 * Snapshots are images committed from session containers, labelled with their owner. They are
 * tagged (`exec-server-snapshot:<random>`) so `docker image prune` does not treat them as
 * dangling; their id (`sha256:...`) is what clients get and pass back as `snapshot`.
 */
import { isImageRef } from '../../../protocol/index.ts';
import { randomBytes } from 'node:crypto';
import type Docker from 'dockerode';
import { ExecServerError, execError } from '../../../errors.ts';
import type { TenantId } from '../../../ids.ts';
import type { SnapshotInfo } from '../../types.ts';
import { statusOf, withDeadline } from '../engine/engine-client.ts';
import { LABEL } from '../container/labels.ts';

/** The repository snapshots are tagged in, so that `docker image prune` keeps them. */
export const SNAPSHOT_REPO = 'exec-server-snapshot';
/** What looking a snapshot up and deleting it use of the engine. */
export interface SnapshotEngine {
  getImage(name: string): Docker.Image;
  listContainers(options?: Docker.ContainerListOptions): Promise<Docker.ContainerInfo[]>;
}
/** Commits copy the container's writable layer: allow for big ones. */
const COMMIT_TIMEOUT_MS = 10 * 60_000;

/** Commits a session container to a snapshot image labelled with its owner. */
export async function commitSnapshot(
  container: Docker.Container,
  o: { sessionId: string; tenant: string; name: string | undefined; memory?: boolean | undefined },
): Promise<SnapshotInfo> {
  const createdAt = new Date().toISOString();
  const labels: Record<string, string> = {
    [LABEL.snapshot]: 'true',
    [LABEL.tenant]: o.tenant,
    [LABEL.snapshotSession]: o.sessionId,
    [LABEL.snapshotCreated]: createdAt,
    // A container started from the snapshot must not look like a pool container.
    [LABEL.pool]: 'false',
  };
  if (o.name !== undefined) labels[LABEL.snapshotName] = o.name;
  if (o.memory === true) labels[LABEL.snapshotMemory] = 'true';
  const tag = randomBytes(8).toString('hex');
  // dockerode sends `_query` as the query string and `_body` (container config to merge) as JSON.
  const result = await withDeadline(
    'commit',
    COMMIT_TIMEOUT_MS,
    (abortSignal) =>
      container.commit({
        _query: {
          container: container.id,
          repo: SNAPSHOT_REPO,
          tag,
          pause: true,
          comment: `exec-server snapshot of session ${o.sessionId}`,
        },
        _body: { Labels: labels },
        abortSignal,
      } as object) as unknown as Promise<{ Id?: string }>,
  );
  if (result.Id === undefined) throw execError('EXEC_ERR_BACKEND', 'commit returned no image id');
  return { snapshotId: result.Id, name: o.name, sessionId: o.sessionId, tenant: o.tenant, createdAt };
}

function toInfo(id: string, labels: Record<string, string> | undefined): SnapshotInfo {
  return {
    snapshotId: id,
    name: labels?.[LABEL.snapshotName],
    sessionId: labels?.[LABEL.snapshotSession],
    tenant: labels?.[LABEL.tenant],
    createdAt: labels?.[LABEL.snapshotCreated] ?? '',
    ...(labels?.[LABEL.snapshotMemory] === 'true' ? { memory: true } : {}),
  };
}

/** The snapshots of `tenant` (every snapshot when undefined) on one engine. */
export async function listSnapshots(
  docker: Docker,
  tenant: TenantId | undefined,
  timeoutMs: number,
): Promise<SnapshotInfo[]> {
  const label = [`${LABEL.snapshot}=true`];
  if (tenant !== undefined) label.push(`${LABEL.tenant}=${tenant}`);
  const images = await withDeadline('image list', timeoutMs, (abortSignal) =>
    docker.listImages({ filters: { label }, abortSignal } as unknown as Docker.ListImagesOptions),
  );
  return images.map((i) => toInfo(i.Id, i.Labels ?? undefined)).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
}

/**
 * Looks a snapshot up for `tenant` (any tenant when undefined). Someone else's snapshot, or an
 * image that is not a snapshot, is "not found", never "forbidden".
 */
export async function findSnapshot(
  docker: Pick<SnapshotEngine, 'getImage'>,
  snapshotId: string,
  tenant: TenantId | undefined,
  timeoutMs: number,
): Promise<SnapshotInfo> {
  const notFound = () => execError('EXEC_ERR_NOT_FOUND', `snapshot ${snapshotId} not found`);
  // Never a path the engine would redirect (`../x`): every edge checks it, and so does this.
  if (!isImageRef(snapshotId)) throw notFound();
  let info: Docker.ImageInspectInfo;
  try {
    info = await withDeadline('image inspect', timeoutMs, (abortSignal) =>
      docker.getImage(snapshotId).inspect({ abortSignal } as unknown as Docker.ImageInspectOptions),
    );
  } catch (err) {
    // 400: a reference the engine cannot parse (a name past its 255 characters) names no image.
    const status = statusOf((err as { cause?: unknown }).cause);
    if (status === 404 || status === 400) throw notFound();
    throw err;
  }
  const labels = info.Config?.Labels ?? undefined;
  if (labels?.[LABEL.snapshot] !== 'true') throw notFound();
  if (tenant !== undefined && labels[LABEL.tenant] !== tenant) throw notFound();
  return toInfo(info.Id, labels);
}

/**
 * A session's `image` may name any image of the engine, by name, id or a prefix of its id
 * (`sha256:…`, `1a2b3c`): one that is another tenant's snapshot is "not found" for this tenant,
 * as through `snapshot`. An image the engine does not have passes (it is pulled, not a snapshot).
 */
export async function refuseForeignSnapshot(
  docker: Docker,
  image: string,
  tenant: TenantId,
  timeoutMs: number,
): Promise<void> {
  let info: Docker.ImageInspectInfo;
  try {
    info = await withDeadline('image inspect', timeoutMs, (abortSignal) =>
      docker.getImage(image).inspect({ abortSignal } as unknown as Docker.ImageInspectOptions),
    );
  } catch (err) {
    if (statusOf((err as { cause?: unknown }).cause) === 404) return;
    throw err;
  }
  const labels = info.Config?.Labels ?? undefined;
  if (labels?.[LABEL.snapshot] === 'true' && labels[LABEL.tenant] !== tenant)
    throw execError('EXEC_ERR_NOT_FOUND', `image ${image} not found`);
}

/**
 * Refuses, naming the sessions, while a container uses the snapshot, stopped ones too. It only
 * names them: a container made after this list is caught by the engine itself (deleteSnapshot).
 */
async function refuseWhileUsed(
  docker: Pick<SnapshotEngine, 'listContainers'>,
  snapshotId: string,
  timeoutMs: number,
): Promise<void> {
  const users = await withDeadline('container list', timeoutMs, (abortSignal) =>
    docker.listContainers({
      all: true,
      filters: { ancestor: [snapshotId] },
      abortSignal,
    } as unknown as Docker.ContainerListOptions),
  );
  if (users.length === 0) return;
  const sessions = users.map((c) => c.Labels?.[LABEL.sessionId]).filter((s): s is string => s !== undefined);
  const others = users.length - sessions.length;
  const what = [
    sessions.length > 0 ? `session${sessions.length > 1 ? 's' : ''} ${sessions.join(', ')}` : '',
    others > 0 ? `${others} other container${others > 1 ? 's' : ''}` : '',
  ]
    .filter((s) => s !== '')
    .join(' and ');
  throw execError('EXEC_ERR_SNAPSHOT_IN_USE', `snapshot ${snapshotId} is in use by ${what}: delete them first`, {
    detail: { sessions },
  });
}

/**
 * Deletes a snapshot and says what happened: gone (or another tenant's) is EXEC_ERR_NOT_FOUND
 * (404), in use by a session or the base of another snapshot EXEC_ERR_SNAPSHOT_IN_USE (409);
 * only a failure of the engine itself is EXEC_ERR_BACKEND (502) or EXEC_ERR_BACKEND_UNAVAILABLE.
 */
export async function deleteSnapshot(
  docker: SnapshotEngine,
  snapshotId: string,
  tenant: TenantId | undefined,
  timeoutMs: number,
): Promise<string> {
  const snap = await findSnapshot(docker, snapshotId, tenant, timeoutMs);
  await refuseWhileUsed(docker, snap.snapshotId, timeoutMs);
  try {
    // By id and never forced, so the engine checks and removes in one step: a container made
    // since the list above (running or stopped) makes it refuse with 409, the snapshot intact. A
    // forced remove would untag or delete an image in use. Its one tag goes with the image;
    // a tag added on the engine by hand makes it refuse too, rather than untag only.
    await withDeadline('image remove', timeoutMs * 6, (abortSignal) =>
      docker.getImage(snap.snapshotId).remove({ abortSignal } as unknown as Docker.ImageRemoveOptions),
    );
  } catch (err) {
    throw await refusal(docker, snapshotId, snap.snapshotId, err, timeoutMs);
  }
  return snap.snapshotId;
}

/** The error of a failed remove of snapshot `id` (asked for as `asked`). */
async function refusal(docker: SnapshotEngine, asked: string, id: string, err: unknown, timeoutMs: number) {
  const cause = (err as { cause?: unknown }).cause;
  if (statusOf(cause) === 404) return execError('EXEC_ERR_NOT_FOUND', `snapshot ${asked} not found`);
  if (statusOf(cause) !== 409) return err;
  const reason = (cause as { json?: { message?: string } }).json?.message ?? (err as Error).message;
  // A snapshot of a session forked from it: an image whose parent it is.
  if (/child images/.test(reason))
    return execError(
      'EXEC_ERR_SNAPSHOT_IN_USE',
      `snapshot ${asked} is the base of other snapshots (of sessions forked from it): delete them first`,
      { cause: err },
    );
  // A container made since the list: the list now names its session, when it still exists.
  if (/being used by/.test(reason)) {
    const named = await refuseWhileUsed(docker, id, timeoutMs).then(
      () => undefined,
      (e: unknown) => e,
    );
    if (named instanceof ExecServerError && named.code === 'EXEC_ERR_SNAPSHOT_IN_USE') return named;
  }
  if (/multiple repositories/.test(reason)) {
    const tags = await withDeadline('image inspect', timeoutMs, (abortSignal) =>
      docker.getImage(id).inspect({ abortSignal } as unknown as Docker.ImageInspectOptions),
    ).then(
      (i) => i.RepoTags ?? [],
      () => [],
    );
    return execError(
      'EXEC_ERR_SNAPSHOT_IN_USE',
      `snapshot ${asked} has several tags on the engine (${tags.join(', ')}): remove all but one first`,
      { cause: err },
    );
  }
  return execError('EXEC_ERR_SNAPSHOT_IN_USE', `snapshot ${asked} is in use: ${reason}`, { cause: err });
}
