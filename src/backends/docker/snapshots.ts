/**
 * Snapshots are images committed from session containers, labelled with their owner. They are
 * tagged (`exec-server-snapshot:<random>`) so `docker image prune` does not treat them as
 * dangling; their id (`sha256:...`) is what clients get and pass back as `snapshot`.
 */
import { randomBytes } from 'node:crypto';
import type Docker from 'dockerode';
import { execError } from '../../errors.ts';
import type { TenantId } from '../../ids.ts';
import type { SnapshotInfo } from '../types.ts';
import { statusOf, withDeadline } from './engine-client.ts';
import { LABEL } from './labels.ts';

export const SNAPSHOT_REPO = 'exec-server-snapshot';
/** Commits copy the container's writable layer: allow for big ones. */
const COMMIT_TIMEOUT_MS = 10 * 60_000;

export async function commitSnapshot(
  container: Docker.Container,
  o: { sessionId: string; tenant: string; name: string | undefined },
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
  };
}

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
  docker: Docker,
  snapshotId: string,
  tenant: TenantId | undefined,
  timeoutMs: number,
): Promise<SnapshotInfo> {
  const notFound = () => execError('EXEC_ERR_NOT_FOUND', `snapshot ${snapshotId} not found`);
  let info: Docker.ImageInspectInfo;
  try {
    info = await withDeadline('image inspect', timeoutMs, (abortSignal) =>
      docker.getImage(snapshotId).inspect({ abortSignal } as unknown as Docker.ImageInspectOptions),
    );
  } catch (err) {
    if (statusOf((err as { cause?: unknown }).cause) === 404) throw notFound();
    throw err;
  }
  const labels = info.Config?.Labels ?? undefined;
  if (labels?.[LABEL.snapshot] !== 'true') throw notFound();
  if (tenant !== undefined && labels[LABEL.tenant] !== tenant) throw notFound();
  return toInfo(info.Id, labels);
}

export async function deleteSnapshot(
  docker: Docker,
  snapshotId: string,
  tenant: TenantId | undefined,
  timeoutMs: number,
): Promise<void> {
  const snap = await findSnapshot(docker, snapshotId, tenant, timeoutMs);
  try {
    // force: also drops every tag; an image still used by a running session is refused (409).
    await withDeadline('image remove', timeoutMs * 6, (abortSignal) =>
      docker.getImage(snap.snapshotId).remove({ force: true, abortSignal } as unknown as Docker.ImageRemoveOptions),
    );
  } catch (err) {
    if (statusOf((err as { cause?: unknown }).cause) === 404)
      throw execError('EXEC_ERR_NOT_FOUND', `snapshot ${snapshotId} not found`);
    throw err;
  }
}
