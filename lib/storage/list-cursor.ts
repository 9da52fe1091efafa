import { InvalidCursorError } from './storage.js'

// The cursors of the paged lists (Storage.listKeysPage, listEndpointsPage):
// the sort values of a page's last item, as base64url JSON, so that a cursor
// is one opaque URL-safe word and the next page starts right after that item
// even when it has been deleted meanwhile.

type CursorValue = string | number

export function encodeCursor (values: readonly CursorValue[]): string {
  return Buffer.from(JSON.stringify(values)).toString('base64url')
}

/**
 * The values of a cursor made by `encodeCursor`, checked against `types`
 * ('string' or 'integer' per value); InvalidCursorError for anything else.
 */
export function decodeCursor (cursor: string, types: ReadonlyArray<'string' | 'integer'>): CursorValue[] {
  let values: unknown
  try {
    if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw new InvalidCursorError()
    values = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
  } catch {
    throw new InvalidCursorError()
  }
  if (!Array.isArray(values) || values.length !== types.length) throw new InvalidCursorError()
  types.forEach((type, i) => {
    const value: unknown = values[i]
    const fits = type === 'string' ? typeof value === 'string' && !value.includes('\u0000') : Number.isSafeInteger(value)
    if (!fits) throw new InvalidCursorError()
  })
  return values as CursorValue[]
}

/** Search text as the lists compare it: A-Z lowered, as SQL lower() does in SQLite and under the "C" collation. */
export function foldSearch (text: string): string {
  return text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase())
}
