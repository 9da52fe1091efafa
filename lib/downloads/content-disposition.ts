/** File names whose header is kept: a download's name is its dataset's, so few recur. */
const KEPT = 256
const made = new Map<string, string>()

/**
 * `attachment` with an ASCII fallback name and the exact UTF-8 name (RFC 6266).
 * encodeURIComponent leaves `'()*` as they are, which RFC 8187 does not allow
 * in the extended value, so they are escaped too. Kept per name: two regular
 * expressions and an encoding per download cost a small download more than
 * one of its rows.
 */
export function contentDisposition (fileName: string): string {
  let header = made.get(fileName)
  if (header === undefined) {
    const ascii = fileName.replace(/[^A-Za-z0-9._-]+/g, '_')
    const extended = encodeURIComponent(fileName).replace(/['()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase())
    header = `attachment; filename="${ascii}"; filename*=UTF-8''${extended}`
    if (made.size >= KEPT) made.delete(made.keys().next().value as string)
    made.set(fileName, header)
  }
  return header
}
