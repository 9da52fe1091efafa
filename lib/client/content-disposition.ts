/**
 * The file name a `Content-Disposition` header suggests: the UTF-8
 * `filename*` (RFC 6266) when present and readable, else `filename`.
 * Only a suggestion: never use it as a path without sanitising it.
 */
export function fileNameOf (header: string | null): string | undefined {
  if (header === null) return undefined
  const extended = /filename\*\s*=\s*UTF-8''([^;\s]+)/i.exec(header)
  if (extended !== null) {
    try {
      return decodeURIComponent(extended[1])
    } catch {}
  }
  const plain = /(?:^|;)\s*filename\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;\s]+))/i.exec(header)
  if (plain === null) return undefined
  return plain[1] !== undefined ? plain[1].replace(/\\(.)/g, '$1') : plain[2]
}
