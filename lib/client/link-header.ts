// The `rel="next"` target of an HTTP Link header (RFC 8288), as the
// management lists give their next page: `<https://…?after=…>; rel="next"`.
// Several links may share the header, separated by commas; `rel` may hold
// several relation types, quoted or not, in any case.

const LINK = /<([^>]*)>((?:\s*;\s*[^;,]*)*)/g
const REL = /;\s*rel\s*=\s*(?:"([^"]*)"|([^\s;,]+))/i

/** The URL of the link whose relation types include `next`, resolved against `base`; null when there is none. */
export function nextPageUrl (header: string | null, base: URL): URL | null {
  if (header === null) return null
  for (const [, target, params] of header.matchAll(LINK)) {
    const rel = REL.exec(params)
    const types = (rel?.[1] ?? rel?.[2] ?? '').toLowerCase().split(/\s+/)
    if (types.includes('next')) return new URL(target, base)
  }
  return null
}
