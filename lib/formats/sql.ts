import type { Entity } from '../dataset-source.js'

// Placeholder until the sql format lands (issue "2 ·"): DDL only.
function quoteIdentifier (name: string): string {
  return '"' + name.replaceAll('"', '""') + '"'
}

export function ddlFor (entities: readonly Entity[]): string {
  return entities.map((e) => `CREATE TABLE ${quoteIdentifier(e.name)} (\n` +
    e.columns.map((c) => `  ${quoteIdentifier(c.name)} ${c.type.toUpperCase()}`).join(',\n') + '\n);\n').join('\n')
}
