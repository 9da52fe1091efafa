import type Database from 'better-sqlite3'

/**
 * What a developer would write by hand for the example's `sales` json: the
 * three tables read with statements prepared once, as objects (`.all()`),
 * and `JSON.stringify`. The hand-written route of example-bench-server.ts
 * and the loop of small-render.ts make the same text this way.
 */
export function handWrittenSales (db: Database.Database): { all: () => Record<string, unknown[]>, text: () => string } {
  const selects = {
    customers: db.prepare('SELECT id, name, email, city, vip, notes, signed_up FROM customers ORDER BY id'),
    products: db.prepare('SELECT id, sku, name, price, in_stock, description FROM products ORDER BY id'),
    orders: db.prepare('SELECT id, customer_id, product_id, quantity, unit_price, paid, placed_at, shipped_at, note FROM orders ORDER BY id')
  }
  const all = (): Record<string, unknown[]> => ({ customers: selects.customers.all(), products: selects.products.all(), orders: selects.orders.all() })
  return { all, text: () => JSON.stringify(all()) }
}
