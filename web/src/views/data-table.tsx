/** A table of the console: its wrapper, its caption for screen readers and its header row. */
import type { ComponentChildren } from 'preact';

/** A column: its title; `num` right-aligns it; `hidden` keeps the title for screen readers only. */
export interface Column {
  readonly title: string;
  readonly num?: boolean;
  readonly hidden?: boolean;
}

export function DataTable({
  label,
  columns,
  children,
}: {
  label: string;
  columns: readonly Column[];
  children: ComponentChildren;
}) {
  return (
    <div class="table-wrap">
      <table class="table" aria-label={label}>
        <thead>
          <tr>
            {columns.map((c) => (
              <th key={c.title} scope="col" class={c.num ? 'num' : undefined}>
                {c.hidden ? <span class="sr-only">{c.title}</span> : c.title}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </div>
  );
}
