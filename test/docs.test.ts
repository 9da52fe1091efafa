import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import ts from 'typescript'

// The README and docs/: every relative link resolves (to a file, and to a
// heading when it names one), and the README's quick-start code type-checks
// against the package's own types.

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const documents = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes. */
function slug (heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-')
}

function anchorsOf (file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '')
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1])))
}

t.test('every relative link in the README and docs/ resolves', async (t) => {
  let checked = 0
  for (const doc of documents) {
    const text = readFileSync(join(root, doc), 'utf8').replace(/```[\s\S]*?```/g, '')
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/i.test(target)) continue
      const [path, anchor] = target.split('#')
      const file = path === '' ? join(root, doc) : resolve(dirname(join(root, doc)), path)
      t.ok(existsSync(file), `${doc}: ${target} exists`)
      if (anchor !== undefined && existsSync(file)) t.ok(anchorsOf(file).has(anchor), `${doc}: ${target} names a heading of ${relative(root, file)}`)
      checked++
    }
  }
  t.ok(checked > 20, `${checked} links checked`)
})

t.test('the README stays short and opens with the two commands', async (t) => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  t.ok(readme.split('\n').length <= 300, `${readme.split('\n').length} lines`)
  t.match(readme.split('\n').slice(0, 6).join('\n'), /npm ci && npm start[\s\S]*npm test/)
})

t.test('the README\'s quick-start code type-checks against the package\'s own types', async (t) => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  const start = readme.indexOf('## Quick start')
  const code = /```ts\n([\s\S]*?)```/.exec(readme.slice(start))?.[1]
  if (code === undefined) throw new Error('no TypeScript block in the quick start')
  mkdirSync(join(root, '.tap'), { recursive: true })
  const dir = mkdtempSync(join(root, '.tap', 'readme-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = join(dir, 'quick-start.ts')
  writeFileSync(file, code)
  const program = ts.createProgram([file], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: ['node'],
    // The package name, as a user imports it, resolved to this checkout's source.
    baseUrl: root,
    paths: { 'fastify-data-endpoints': ['lib/index.ts'] },
    allowImportingTsExtensions: true
  })
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'))
  t.same(diagnostics, [], 'no type errors')
})
