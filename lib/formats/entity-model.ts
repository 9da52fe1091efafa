import type { Column, Entity } from '../host/dataset-source.js'

// Checks the host's entity and column descriptions before anything is sent,
// so a model no format can write answers 500 with a clear message instead of
// a broken file.

const TYPES = new Set(['integer', 'bigint', 'decimal', 'float', 'text', 'boolean', 'date', 'timestamp', 'binary', 'json'])

function checkName (what: string, name: unknown): string {
  if (typeof name !== 'string' || name === '' || name.includes('\0')) {
    throw new Error(`Invalid dataset model: ${what} name must be a non-empty string without NUL`)
  }
  return name
}

function isIntegerIn (value: unknown, min: number, max: number): boolean {
  return Number.isInteger(value) && (value as number) >= min && (value as number) <= max
}

function checkColumn (entity: string, column: Column): void {
  const where = `entity "${entity}", column "${column.name}"`
  if (!TYPES.has(column.type)) throw new Error(`Invalid dataset model: ${where} has an unknown type`)
  // PostgreSQL's limits: numeric precision 1..1000, varchar length 1..10485760.
  if (column.type === 'decimal' && !(isIntegerIn(column.precision, 1, 1000) && isIntegerIn(column.scale, 0, column.precision))) {
    throw new Error(`Invalid dataset model: ${where} needs precision 1..1000 and scale 0..precision`)
  }
  if (column.type === 'text' && column.maxLength !== undefined && !isIntegerIn(column.maxLength, 1, 10485760)) {
    throw new Error(`Invalid dataset model: ${where} needs maxLength 1..10485760`)
  }
}

/** The columns a host declares for `where` exist and can be filtered; a change column fits its kind. */
function checkConsumerSupport (entity: Entity): void {
  const support = entity.consumer
  if (support === undefined) return
  for (const name of support.filters ?? []) {
    const column = entity.columns.find((c) => c.name === name)
    if (column === undefined || column.type === 'binary' || column.type === 'json') {
      throw new Error(`Invalid dataset model: entity "${entity.name}" declares filters on "${String(name)}", which is not one of its columns of a filterable type (not binary nor json)`)
    }
  }
  const changes = support.changes
  if (changes !== undefined) {
    const column = entity.columns.find((c) => c.name === changes.column)
    const fits = column !== undefined && (changes.kind === 'timestamp'
      ? column.type === 'timestamp'
      : changes.kind === 'version' && (column.type === 'integer' || column.type === 'bigint'))
    if (!fits) {
      throw new Error(`Invalid dataset model: entity "${entity.name}" declares change column "${String(changes.column)}", which must be ` +
        'one of its columns: a timestamp column for kind timestamp, an integer or bigint one for kind version')
    }
  }
}

const checked = new WeakSet<readonly Entity[]>()

/**
 * Throws on: an empty or duplicate entity name, an entity without columns,
 * an empty or duplicate column name (case-insensitive, as SQLite compares
 * them), an unknown type or out-of-range type parameters.
 */
export function checkEntities (entities: readonly Entity[]): void {
  if (checked.has(entities)) return
  const entityNames = new Set<string>()
  for (const entity of entities) {
    const name = checkName('an entity', entity.name)
    if (entityNames.has(name.toLowerCase())) throw new Error(`Invalid dataset model: entity "${name}" appears twice`)
    entityNames.add(name.toLowerCase())
    if (!Array.isArray(entity.columns) || entity.columns.length === 0) {
      throw new Error(`Invalid dataset model: entity "${name}" has no columns`)
    }
    const columnNames = new Set<string>()
    for (const column of entity.columns) {
      const columnName = checkName(`a column of entity "${name}": the`, column.name).toLowerCase()
      if (columnNames.has(columnName)) throw new Error(`Invalid dataset model: entity "${name}" has column "${column.name}" twice`)
      columnNames.add(columnName)
      checkColumn(name, column)
    }
    checkConsumerSupport(entity)
  }
  checked.add(entities)
}
