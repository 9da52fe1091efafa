import { LATEST_TIMESTAMP } from '../inputs.js'
import { migrationSql, type Dialect, type Migration } from './table-list.js'
import { LINK_SECRETS_TABLE, LINKS_TABLE } from './link-tables.js'

// Migrations from number 6 on, shared by both adapters. The first five
// (MIGRATIONS in sqlite-storage.ts and pg-storage.ts) were written once per
// dialect and have shipped: never edit them (test/storage/table-list.test.ts
// holds their checksums). A new migration goes at the end of this list, as
// steps over tables described once (table-list.ts):
//
//   {
//     why: 'Download links (DESIGN.md §4.2): one row per link, gone with its key',
//     steps: [{
//       createTable: {
//         name: 'links',
//         columns: [
//           { name: 'id', type: 'text' },
//           { name: 'key_id', type: 'text', references: { table: 'api_keys', column: 'id', onDelete: 'cascade' } },
//           { name: 'params', type: 'json' },
//           { name: 'created_at', type: 'timestamp' },
//           { name: 'revoked_at', type: 'timestamp', nullable: true }
//         ],
//         primaryKey: ['id'],
//         indexes: [{ name: 'links_key', columns: ['key_id'] }]
//       }
//     }, { addColumn: { table: 'api_keys', column: { name: 'requests_per_minute', type: 'integer', nullable: true } } }]
//   }
//
// Each adapter appends `migrationsFor(its dialect)` to its own list: the SQL
// of both is generated from the one description, and the adapter reads and
// writes the table's rows with `insertSql`, `toColumns` and `fromRow`, so
// its row mapper has the same shape on both stores. `sql` steps are for what
// is not a table's shape (a data fix), written once per dialect.
export const SHARED_MIGRATIONS: readonly Migration[] = [
  {
    why: 'Expiries past the last instant both stores hold (issue 12): written before timestamps were read by lib/inputs.ts, ' +
      'they made every answer that lists the key fail. Each becomes 9999-12-31T23:59:59.999Z: the key still never expires in practice',
    steps: [{
      sql: {
        sqlite: `UPDATE api_keys SET expires_at = ${LATEST_TIMESTAMP} WHERE expires_at > ${LATEST_TIMESTAMP};`,
        pg: `UPDATE api_keys SET expires_at = '${new Date(LATEST_TIMESTAMP).toISOString()}' WHERE expires_at > '${new Date(LATEST_TIMESTAMP).toISOString()}';`
      }
    }]
  },
  {
    why: 'A project\'s keys in their order (issue 18): a page of them is read from where the last ended, ' +
      'with no sort of the project\'s keys; the index it replaces was its first two columns',
    steps: [
      { createIndex: { table: 'api_keys', name: 'api_keys_project_order', columns: ['organization', 'project', 'created_at', 'id'] } },
      { sql: { sqlite: 'DROP INDEX api_keys_project;', pg: 'DROP INDEX api_keys_project;' } }
    ]
  },
  {
    why: 'One key\'s usage history from its index alone (issue 15): a year of one key by hour read 9,000 buckets ' +
      'scattered over as many table pages, most of the query\'s time on PostgreSQL. The index keeps its name ' +
      '(SQLite\'s queries name it) and now holds every column a usage query reads',
    steps: [{
      sql: {
        sqlite: `DROP INDEX usage_hourly_key;
CREATE INDEX usage_hourly_key ON usage_hourly (key_id, endpoint_id, start, outcome, count);
DROP INDEX usage_daily_key;
CREATE INDEX usage_daily_key ON usage_daily (key_id, endpoint_id, start, outcome, count);`,
        pg: `DROP INDEX usage_hourly_key;
CREATE INDEX usage_hourly_key ON usage_hourly (key_id, endpoint_id, start) INCLUDE (outcome, count);
DROP INDEX usage_daily_key;
CREATE INDEX usage_daily_key ON usage_daily (key_id, endpoint_id, start) INCLUDE (outcome, count);`
      }
    }]
  },
  {
    why: 'Per-key limits (issue 26, DESIGN.md §4.3): three nullable limits on the key, read with it on every lookup; ' +
      'each key\'s count in its current minute (one row per key); its download slots, each held by a lease that ' +
      'its instance renews, so that a crashed instance\'s slot frees itself; and the bytes each usage bucket\'s downloads sent',
    steps: [
      { addColumn: { table: 'api_keys', column: { name: 'requests_per_minute', type: 'integer', nullable: true } } },
      { addColumn: { table: 'api_keys', column: { name: 'concurrent_downloads', type: 'integer', nullable: true } } },
      { addColumn: { table: 'api_keys', column: { name: 'bytes_per_day', type: 'integer', nullable: true } } },
      {
        createTable: {
          name: 'key_request_windows',
          columns: [
            { name: 'key_id', type: 'text', references: { table: 'api_keys', column: 'id', onDelete: 'cascade' } },
            // ms since the epoch, the plugin's clock: the minute counted
            { name: 'window_start', type: 'integer' },
            { name: 'count', type: 'integer' }
          ],
          primaryKey: ['key_id']
        }
      },
      {
        createTable: {
          name: 'download_slots',
          columns: [
            { name: 'key_id', type: 'text', references: { table: 'api_keys', column: 'id', onDelete: 'cascade' } },
            { name: 'slot', type: 'integer' },
            { name: 'lease_id', type: 'text' },
            // ms since the epoch: past it the slot is free
            { name: 'expires_at', type: 'integer' }
          ],
          primaryKey: ['key_id', 'slot']
        }
      },
      // Rows already there sent nothing that was counted: 0, not NULL.
      {
        sql: {
          // The key indexes hold every column a usage query reads (issue 15's migration): bytes too.
          sqlite: `ALTER TABLE usage_hourly ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
DROP INDEX usage_hourly_key;
CREATE INDEX usage_hourly_key ON usage_hourly (key_id, endpoint_id, start, outcome, count, bytes);
DROP INDEX usage_daily_key;
CREATE INDEX usage_daily_key ON usage_daily (key_id, endpoint_id, start, outcome, count, bytes);`,
          pg: `ALTER TABLE usage_hourly ADD COLUMN bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN bytes bigint NOT NULL DEFAULT 0;
DROP INDEX usage_hourly_key;
CREATE INDEX usage_hourly_key ON usage_hourly (key_id, endpoint_id, start) INCLUDE (outcome, count, bytes);
DROP INDEX usage_daily_key;
CREATE INDEX usage_daily_key ON usage_daily (key_id, endpoint_id, start) INCLUDE (outcome, count, bytes);`
        }
      }
    ]
  },
  // (Issue 24 takes the 10th entry; the 8th and 9th are issues 25 and 26's.
  // Whichever lands later keeps that order when merging.)
  {
    why: 'Download links (issue 24, DESIGN.md §4.2): one row per link, gone with its key, and the secrets that sign them',
    steps: [{ createTable: LINKS_TABLE }, { createTable: LINK_SECRETS_TABLE }]
  },
  {
    why: 'PostgreSQL mode\'s key check from a memo (issue 25): every statement that changes what a key lookup reads ' +
      '(a key\'s row, an assignment, an endpoint\'s place) notes its transaction, so that a lookup can ask, in its one ' +
      'round trip, whether anything committed since the memo was read. The note is written as the schema\'s owner ' +
      '(SECURITY DEFINER, its search_path fixed), so that a role allowed to change a key need not be allowed more. ' +
      'SQLite needs none: its memo reads its own counters',
    steps: [{
      sql: {
        sqlite: '-- nothing: SQLite\'s lookup memo is stamped by total_changes() and PRAGMA data_version',
        pg: `CREATE TABLE lookup_changes (xid xid8 NOT NULL);
CREATE INDEX lookup_changes_xid ON lookup_changes (xid);
CREATE FUNCTION note_lookup_change() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO lookup_changes (xid) VALUES (pg_current_xact_id());
  RETURN NULL;
END $$;
CREATE TRIGGER api_keys_lookup_change
  AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF id, prefix, hash, is_active, expires_at, requests_per_minute, concurrent_downloads, bytes_per_day
  ON api_keys FOR EACH STATEMENT EXECUTE FUNCTION note_lookup_change();
CREATE TRIGGER endpoint_keys_lookup_change
  AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
  ON endpoint_keys FOR EACH STATEMENT EXECUTE FUNCTION note_lookup_change();
CREATE TRIGGER endpoints_lookup_change
  AFTER INSERT OR DELETE OR TRUNCATE OR UPDATE OF id, organization, project, model_sequence, type, resource_sequence
  ON endpoints FOR EACH STATEMENT EXECUTE FUNCTION note_lookup_change();`
      }
    }]
  },
  {
    why: 'PostgreSQL mode\'s key check, cheaper when the memo answers (issue 25): the reading of a batch\'s lookups moves ' +
      'into a function that the lookup statement calls only when it reads them. Inline, its joins were set up (their ' +
      'tables locked, their indexes opened) on every execution, taken or not: about 25 µs of the database\'s CPU a batch, ' +
      'a third of it. STABLE, so that it reads in the calling statement\'s snapshot, the one the memo is stamped with',
    steps: [{
      sql: {
        sqlite: '-- nothing: SQLite reads a lookup with one prepared statement',
        pg: `CREATE FUNCTION lookup_answers(lookups text) RETURNS json LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
BEGIN
  RETURN (
    SELECT COALESCE(json_agg(json_build_array(l.i, e.id, k.id, k.hash, k.is_active, floor(extract(epoch FROM k.expires_at) * 1000)::float8,
                                              k.requests_per_minute, k.concurrent_downloads, k.bytes_per_day,
                                              CASE WHEN k.bytes_per_day IS NOT NULL THEN (SELECT COALESCE(sum(u.bytes), 0) FROM usage_daily u
                                                WHERE u.key_id = k.id AND u.start = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') END)), '[]')
      FROM json_array_elements(lookups::json) AS j (v)
      CROSS JOIN LATERAL (SELECT (v->>0)::int AS i, v->>1 AS organization, v->>2 AS project, (v->>3)::bigint AS model_sequence,
                                 v->>4 AS type, (v->>5)::bigint AS resource_sequence, v->>6 AS prefix) l
      JOIN endpoints e ON e.organization = l.organization AND e.project = l.project
           AND e.model_sequence = l.model_sequence AND e.type = l.type AND e.resource_sequence = l.resource_sequence
      LEFT JOIN (endpoint_keys ek JOIN api_keys k ON k.id = ek.key_id)
           ON ek.endpoint_id = e.id AND k.prefix = l.prefix);
END $$;`
      }
    }]
  }
]

/** The shared migrations' SQL in one dialect, each one script, in order. */
export function migrationsFor (dialect: Dialect): string[] {
  return SHARED_MIGRATIONS.map((m) => migrationSql(m, dialect))
}
