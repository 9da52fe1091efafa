import type { Table } from './table-list.js'

// The tables of download links (DESIGN.md §4.2), described once for both
// adapters (table-list.ts): the migration creates them, and each adapter
// writes their rows with `insertSql` / `toColumns` and reads them with `fromRow`.

/**
 * One row per minted link. It goes with its key (cascade); `key_prefix` is
 * the key's prefix when the link was minted, so a regenerated key (a new
 * prefix) ends its links. `endpoint_id` is no foreign key: a link whose
 * endpoint was deleted stays, and its use answers `Unknown API Endpoint`.
 */
export const LINKS_TABLE: Table = {
  name: 'links',
  columns: [
    { name: 'id', type: 'text' },
    { name: 'key_id', type: 'text', references: { table: 'api_keys', column: 'id', onDelete: 'cascade' } },
    { name: 'key_prefix', type: 'text' },
    { name: 'endpoint_id', type: 'text' },
    { name: 'params', type: 'json' },
    { name: 'created_at', type: 'timestamp' },
    { name: 'expires_at', type: 'timestamp' },
    { name: 'revoked_at', type: 'timestamp', nullable: true }
  ],
  primaryKey: ['id'],
  indexes: [{ name: 'links_key', columns: ['key_id', 'created_at'] }, { name: 'links_expires', columns: ['expires_at'] }]
}

/**
 * The secrets that sign link tokens, shared by every instance through the
 * store. The newest signs; every one listed verifies, so a rotation lets old
 * and new overlap until the old one is deleted.
 */
export const LINK_SECRETS_TABLE: Table = {
  name: 'link_secrets',
  columns: [
    { name: 'id', type: 'text' },
    { name: 'secret', type: 'text' },
    { name: 'created_at', type: 'timestamp' }
  ],
  primaryKey: ['id']
}
