/** Base64 and UTF-8 helpers shared by the browser code and its node tests (no DOM types). */

/** Standard base64 to bytes. */
export function fromBase64(text: string): Uint8Array {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/** Bytes to standard (padded) base64. */
export function toBase64(bytes: Uint8Array): string {
  let binary = '';
  // In slices: String.fromCharCode takes its bytes as arguments.
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

/** A string as base64 of its UTF-8 bytes (what `process/write` takes). */
export function utf8Base64(text: string): string {
  return toBase64(new TextEncoder().encode(text));
}

/** A string as unpadded base64url of its UTF-8 bytes (the token subprotocol). */
export function utf8Base64Url(text: string): string {
  return utf8Base64(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}
