import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { test } from 'tap'

// lib/ reads top-down: a module imports only from its own folder or from
// the layers below it, never back up (README, "Code layout"). Type-only
// imports count too: they are what a reader follows.
const LIB = resolve(dirname(fileURLToPath(import.meta.url)), '../lib')

/** Layers from the top; a module may import its own layer and those after it. */
const LAYERS = [
  ['index.ts', 'cli.ts'],
  ['client'],
  ['routes'],
  ['options.ts'],
  ['downloads'],
  ['keys'],
  ['storage'],
  ['formats'],
  ['host'],
  ['metrics.ts'],
  ['inputs.ts'],
  ['errors.ts']
]

function layerOf (file: string): number {
  const top = relative(LIB, file).split('/')[0]
  const layer = LAYERS.findIndex((names) => names.includes(top))
  if (layer === -1) throw new Error(`lib/${relative(LIB, file)} is in no layer of test/layering.test.ts`)
  return layer
}

function modules (folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name)
    if (entry.isDirectory()) return modules(path)
    return entry.name.endsWith('.ts') ? [path] : []
  })
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s+'(\.{1,2}\/[^']+)'/g

/** The imports of `file` (whose text is `text`) that go to a layer above it. */
function upwardImports (file: string, text: string): string[] {
  const upward: string[] = []
  for (const [, specifier] of text.matchAll(IMPORT)) {
    const target = resolve(dirname(file), specifier.replace(/\.js$/, '.ts'))
    if (layerOf(target) < layerOf(file)) upward.push(`lib/${relative(LIB, file)} -> lib/${relative(LIB, target)}`)
  }
  return upward
}

test('every import in lib/ goes to its own layer or a lower one', async (t) => {
  const files = modules(LIB)
  t.ok(files.length > 50, `read ${files.length} modules`)
  let imports = 0
  const upward: string[] = []
  for (const file of files) {
    const text = readFileSync(file, 'utf8')
    imports += [...text.matchAll(IMPORT)].length
    upward.push(...upwardImports(file, text))
  }
  t.ok(imports > 200, `checked ${imports} imports`)
  t.same(upward, [], 'no import runs back up')
})

test('the check sees an upward import, type-only and over several lines too', async (t) => {
  const file = join(LIB, 'storage/example.ts')
  const text = "import type {\n  KeyVerifier\n} from '../keys/key-verifier.js'\nimport { x } from './storage.js'\nexport { y } from '../errors.js'\n"
  t.same(upwardImports(file, text), ['lib/storage/example.ts -> lib/keys/key-verifier.ts'])
  t.throws(() => layerOf(join(LIB, 'nowhere/x.ts')), /in no layer/)
})
