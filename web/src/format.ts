/** Display formatting: sizes, durations, policies. */
import type { ApprovalPolicy } from '../../src/protocol/session.ts';

export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return '—';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

export function duration(ms: number): string {
  if (ms < 0) ms = 0;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function since(iso: string | number, now: number): string {
  const t = typeof iso === 'number' ? iso : Date.parse(iso);
  return Number.isNaN(t) ? '—' : duration(now - t);
}

export function time(ms: number): string {
  return new Date(ms).toLocaleTimeString(undefined, { hour12: false });
}

export function approvalPolicy(p: ApprovalPolicy): string {
  return typeof p === 'string' ? p : `granular${p.granular.sandboxApproval ? ' (sandbox approval)' : ''}`;
}

export function shortId(id: string): string {
  return id.length > 12 ? `${id.slice(0, 8)}…` : id;
}

export function cpu(p: number | null | undefined): string {
  return p === null || p === undefined ? '…' : `${p.toFixed(p < 10 ? 1 : 0)}%`;
}
