/** The one list grammar of options and variables: comma-separated entries, blanks around each trimmed. */

/** `a, b,,c` -> `['a', 'b', '', 'c']`: every entry, trimmed, blanks kept (for callers that refuse them). */
export function commaEntries(value: string): string[] {
  return value.split(',').map((e) => e.trim());
}

/** `a, b,,c` -> `['a', 'b', 'c']`: the entries, trimmed, blanks dropped. */
export function commaList(value: string | undefined): string[] {
  return value === undefined ? [] : commaEntries(value).filter((e) => e !== '');
}
