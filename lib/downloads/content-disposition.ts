/**
 * `attachment` with an ASCII fallback name and the exact UTF-8 name (RFC 6266).
 * encodeURIComponent leaves `'()*` as they are, which RFC 8187 does not allow
 * in the extended value, so they are escaped too.
 */
export function contentDisposition (fileName: string): string {
  const ascii = fileName.replace(/[^A-Za-z0-9._-]+/g, '_')
  const extended = encodeURIComponent(fileName).replace(/['()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase())
  return `attachment; filename="${ascii}"; filename*=UTF-8''${extended}`
}
