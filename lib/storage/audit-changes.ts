import { hasLimits, type ApiKeyRecord, type AuditChange, type LinkRecord } from './storage.js'

// What an audit entry says changed (DESIGN.md §4.1): the fields that differ,
// each old and new, never a key value or hash. Shared by the adapters, which
// write the entry in the transaction of the change.

const KEY_FIELDS = ['purpose', 'isActive', 'expiresAt', 'limits'] as const

type LimitsField = ApiKeyRecord['limits'] | null

/** A key's audited fields as JSON values; all null for no key (before a creation, after a deletion). */
function keyFields (key: ApiKeyRecord | null): Record<typeof KEY_FIELDS[number], string | boolean | LimitsField> {
  return {
    purpose: key?.purpose ?? null,
    isActive: key?.isActive ?? null,
    expiresAt: key?.expiresAt?.toISOString() ?? null,
    // The three limits as one field: an entry shows the whole of them before
    // and after; null for a key with none, as for no key.
    limits: key === null || !hasLimits(key.limits) ? null : { ...key.limits }
  }
}

function same (a: unknown, b: unknown): boolean {
  return typeof a === 'object' && a !== null && typeof b === 'object' && b !== null
    ? JSON.stringify(a) === JSON.stringify(b)
    : a === b
}

/** The key fields that differ between `before` and `after` (either may be null: created, deleted). */
export function keyChanges (before: ApiKeyRecord | null, after: ApiKeyRecord | null): Record<string, AuditChange> {
  const from = keyFields(before)
  const to = keyFields(after)
  const changes: Record<string, AuditChange> = {}
  for (const field of KEY_FIELDS) {
    if (!same(from[field], to[field])) changes[field] = { from: from[field], to: to[field] }
  }
  return changes
}

/** An endpoint's assigned key ids before and after, when they differ as sets (both sorted). */
export function keyIdChanges (before: readonly string[], after: readonly string[]): Record<string, AuditChange> {
  const from = [...new Set(before)].sort()
  const to = [...new Set(after)].sort()
  return from.join('\n') === to.join('\n') ? {} : { keyIds: { from, to } }
}

/** A new link's audited fields: what it downloads and until when (never its token). */
export function linkChanges (link: LinkRecord): Record<string, AuditChange> {
  return {
    params: { from: null, to: link.params },
    expiresAt: { from: null, to: link.expiresAt.toISOString() }
  }
}
