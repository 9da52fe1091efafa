// The management page of fastify-data-endpoints: plain DOM and fetch, no
// framework, no build. It talks only to the management API beside it
// (<managementPrefix>/...), with the caller's own credentials: the session
// cookie the browser sends, or an optional bearer token kept in this tab.
// Strings from the API are only ever set as text, never parsed as HTML.

const API = new URL('../', location.href)
const TOKEN_KEY = 'data-endpoints-token'

const HOUR_MS = 60 * 60 * 1000
const DAY_MS = 24 * HOUR_MS
/** The charts' span: the current UTC hour and the 167 before it. */
const CHART_HOURS = 7 * 24
/** Keys that expire sooner than this are flagged. */
const EXPIRY_WARNING_MS = 7 * DAY_MS

/** Rows per page of the keys and endpoints tables: a project of 10,000 keys is read and drawn a page at a time. */
const PAGE_SIZE = 25
/** Keys the assign form offers before the user types: the first of the project, or the first matches. */
const CHOICES = 20
/** Resources the picker lists at once; past it, a search box finds the others. */
const RESOURCE_CHOICES = 100
/** Usage reads in flight at once, one per row on screen: one of the browser's six connections stays free for the user's actions. */
const USAGE_READS = 5

const $ = (selector) => document.querySelector(selector)
const project = { organization: '', project: '' }
/**
 * Usage over the charts' span of the rows on screen, read per row: by key
 * id and by endpoint id, a series or { error } when the usage route refused.
 */
let usage = { first: 0, byKey: new Map(), byEndpoint: new Map() }
/** The server's clock less the browser's (from the Date header): the charts end at the server's hour. */
let clockOffset = 0

class ApiError extends Error {
  constructor (message, status) {
    super(message)
    this.status = status
  }
}

/** Calls the management API; resolves to the JSON answer, or rejects with the API's message. */
async function call (method, path, body) {
  return (await send(method, path, body)).data
}

/** A page of a list: its items, and the `after` of the next page (from the Link header), or null. */
async function callPage (path, params) {
  const query = new URLSearchParams(Object.entries(params).filter(([, value]) => value !== undefined && value !== ''))
  const { data, res } = await send('GET', `${path}?${query}`)
  // The Link URL is absolute, on the address the server was asked at; only its cursor is taken.
  const link = /<([^>]*)>\s*;\s*rel="?next"?/.exec(res.headers.get('link') ?? '')
  return { items: data, after: link === null ? null : new URL(link[1], location.href).searchParams.get('after') }
}

/** Every item of a list, following its pages (the endpoints a rotation works on). */
async function callAll (path, params) {
  const items = []
  for (let after; ;) {
    const page = await callPage(path, { ...params, limit: 500, after })
    items.push(...page.items)
    if (page.after === null) return items
    after = page.after
  }
}

async function send (method, path, body) {
  const headers = { accept: 'application/json' }
  const token = sessionStorage.getItem(TOKEN_KEY)
  if (token) headers.authorization = `Bearer ${token}`
  if (body !== undefined) headers['content-type'] = 'application/json'
  const base = `${encodeURIComponent(project.organization)}/${encodeURIComponent(project.project)}/`
  let res
  try {
    res = await fetch(new URL(base + path, API), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store', credentials: 'same-origin'
    })
  } catch (err) {
    throw new ApiError(`the server could not be reached (${err.message})`, 0)
  }
  const date = Date.parse(res.headers.get('date') ?? '')
  // The header has whole seconds: a server clock found ahead moves the charts' end; one behind changes nothing.
  if (!Number.isNaN(date)) clockOffset = Math.max(0, date - Date.now())
  if (res.status === 204) return { data: null, res }
  const data = await res.json().catch(() => null)
  if (!res.ok) {
    const message = typeof data?.message === 'string' ? data.message : `HTTP ${res.status} ${res.statusText}`
    throw new ApiError(message, res.status)
  }
  return { data, res }
}

/** Creates an element; `props` are DOM properties such as textContent (never markup). */
function el (tag, { attrs = {}, ...props } = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props)
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value)
  node.append(...children)
  return node
}

/**
 * Replaces a table's rows, keeping the keyboard focus on the same action of
 * the same row (buttons carry data-focus); when that row is gone, the
 * section's heading takes the focus, so the next Tab starts there.
 */
function replaceRows (table, rows, heading) {
  const hadFocus = table.contains(document.activeElement)
  const focused = hadFocus ? document.activeElement.dataset.focus : undefined
  table.tBodies[0].replaceChildren(...rows)
  table.hidden = rows.length === 0
  if (!hadFocus) return
  const same = focused === undefined ? null : table.querySelector(`[data-focus="${CSS.escape(focused)}"]`)
  ;(same ?? heading).focus()
}

function setStatus (text) {
  $('#status').textContent = text
}

function clearError () {
  $('#error').hidden = true
  $('#error').textContent = ''
}

function showError (action, err) {
  let text = `${action}: ${err.message}`
  if (err.status === 403) {
    text += '. This page needs the permission ManageAPIKeys: sign in to the application, or give an access token.'
  }
  setStatus('')
  $('#error').textContent = text
  $('#error').hidden = false
}

/**
 * Runs an action; its failure shows the API's message. The last action's
 * status goes first, so that the same words said again (a second save of
 * the same key) are a change that screen readers announce, and no one reads
 * an old status as the new action's.
 */
async function attempt (action, work) {
  clearError()
  setStatus('')
  try {
    await work()
    return true
  } catch (err) {
    showError(action, err)
    return false
  }
}

// --- field checks ----------------------------------------------------------

// The API's rules, checked as the user types, so that the browser refuses to
// submit and says why. A purpose counts code points, as the API does (the
// maxlength attribute would count UTF-16 units: two per emoji).
const PURPOSE_MAX = 200

function purposeProblem (input) {
  const value = input.value
  if (value === '') return '' // the required attribute says so
  if (value.trim() === '') return 'Enter a purpose that is not only spaces.'
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(value)) return 'Remove the control characters from the purpose.'
  const length = [...value].length
  return length > PURPOSE_MAX ? `Use at most ${PURPOSE_MAX} characters (now ${length}).` : ''
}

// A number field takes 01, 1.0, 1e3 or 1e20 too; the API takes 1 to 2^53 - 1
// (the assign form sends the number in plain digits).
function sequenceProblem (input) {
  const n = input.valueAsNumber
  if (input.value === '' || (Number.isSafeInteger(n) && n >= 1)) return ''
  return `Enter a whole number from 1 to ${Number.MAX_SAFE_INTEGER}.`
}

// An expiry in the past is refused by the API; a field left as it was
// (an expired key whose purpose is edited) is not checked.
function expiryProblem (input) {
  if (input.value === '' || input.value === input.dataset.unchanged) return ''
  const at = new Date(input.value).getTime()
  if (Number.isNaN(at)) return 'Enter a date and a time.'
  return at <= Date.now() ? 'Choose a time in the future, or leave the field empty for no expiry.' : ''
}

// A key's limit: empty (none) or a whole number from 1.
function limitProblem (input) {
  return input.value === '' ? '' : sequenceProblem(input)
}

const LIMIT_FIELDS = ['requestsPerMinute', 'concurrentDownloads', 'bytesPerDay']

const FIELD_CHECKS = new Map([
  ['purpose', purposeProblem], ['modelSequence', sequenceProblem], ['resourceSequence', sequenceProblem], ['expiresAt', expiryProblem],
  ...LIMIT_FIELDS.map((name) => [name, limitProblem])
])

/** Sets a field's own validity message; call it too after setting its value from code. */
function checkField (input) {
  input.setCustomValidity(FIELD_CHECKS.get(input.name)(input))
}
document.addEventListener('input', (event) => {
  if (FIELD_CHECKS.has(event.target.name)) checkField(event.target)
})

/** Checks a form's fields again (time has passed since they were typed); false when one is refused. */
function recheck (form) {
  for (const input of form.elements) if (FIELD_CHECKS.has(input.name)) checkField(input)
  return form.reportValidity()
}

// --- times -----------------------------------------------------------------

const hourStart = (ms) => ms - (ms % HOUR_MS)
const hourFormat = new Intl.DateTimeFormat(undefined, { weekday: 'short', day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit' })
const clockFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' })

function timeEl (iso, text = new Date(iso).toLocaleString()) {
  return el('time', { dateTime: iso, textContent: text })
}

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`

/** "in 5 hours", "in 3 days": how long until an expiry, roughly. */
function timeLeft (ms) {
  if (ms < HOUR_MS) return 'within the hour'
  if (ms < 2 * DAY_MS) return `in ${plural(Math.round(ms / HOUR_MS), 'hour', 'hours')}`
  return `in ${plural(Math.round(ms / DAY_MS), 'day', 'days')}`
}

/** The value of a datetime-local field (local wall time, to the minute) for an ISO time. */
function localInputValue (iso) {
  const d = new Date(iso)
  const pad = (n) => String(n).padStart(2, '0')
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`
}

/** The ISO time of a datetime-local field (read as local time), or null when it is empty. */
function expiryOf (input) {
  return input.value === '' ? null : new Date(input.value).toISOString()
}

// --- dialogs ---------------------------------------------------------------

function confirmAction (text, confirmLabel) {
  const dialog = $('#confirm-dialog')
  $('#confirm-text').textContent = text
  $('#confirm-ok').textContent = confirmLabel
  dialog.returnValue = ''
  dialog.showModal()
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true })
  })
}
$('#confirm-ok').addEventListener('click', () => $('#confirm-dialog').close('ok'))
$('#confirm-cancel').addEventListener('click', () => $('#confirm-dialog').close('cancel'))

/** Shows a key's value once; it leaves the page when the dialog closes. */
function showKeyValue (title, value) {
  $('#key-dialog-title').textContent = title
  $('#key-value').value = value
  $('#copy-status').textContent = ''
  $('#key-dialog').showModal()
}
function forgetKeyValue () {
  $('#key-value').value = ''
  $('#copy-status').textContent = ''
}
// 'close' fires a task after the dialog hides; Escape's 'cancel' and the Done
// button clear the value before it hides, so it is never on screen hidden.
$('#key-dialog').addEventListener('cancel', forgetKeyValue)
$('#key-dialog').addEventListener('close', forgetKeyValue)
$('#close-key').addEventListener('click', () => {
  forgetKeyValue()
  $('#key-dialog').close()
})
$('#copy-key').addEventListener('click', async () => {
  const input = $('#key-value')
  let copied = false
  try {
    await navigator.clipboard.writeText(input.value)
    copied = true
  } catch {
    // Without the clipboard API (plain HTTP off localhost), copy the selection.
    input.select()
    copied = document.execCommand('copy')
  }
  $('#copy-status').textContent = copied ? 'Copied to the clipboard.' : 'Could not copy: select the key and copy it yourself.'
})

let editedKey = null
$('#edit-cancel').addEventListener('click', () => $('#edit-dialog').close())
$('#edit-never').addEventListener('click', () => {
  const input = $('#edit-form').elements.expiresAt
  input.value = ''
  checkField(input)
})
$('#edit-form').addEventListener('submit', async (event) => {
  event.preventDefault()
  const form = event.target
  if (!recheck(form)) return
  const key = editedKey
  // Only what changed: an unchanged expiry that has passed would be refused.
  const patch = {}
  if (form.elements.purpose.value !== key.purpose) patch.purpose = form.elements.purpose.value
  if (form.elements.expiresAt.value !== form.elements.expiresAt.dataset.unchanged) patch.expiresAt = expiryOf(form.elements.expiresAt)
  // The limits changed, as numbers typed in plain digits (empty: none).
  const limits = {}
  for (const name of LIMIT_FIELDS) {
    const input = form.elements[name]
    const value = input.value === '' ? null : Number(input.value)
    if (value !== key.limits[name]) limits[name] = value
  }
  if (Object.keys(limits).length > 0) patch.limits = limits
  $('#edit-dialog').close()
  if (Object.keys(patch).length === 0) return setStatus(`Key ${key.prefix}: nothing changed.`)
  await attempt('Could not edit the key', async () => {
    keyChanged(await call('PATCH', `keys/${encodeURIComponent(key.id)}`, patch))
    await refreshAudit()
    setStatus(`Key ${key.prefix} saved.`)
  })
})

// --- usage charts ----------------------------------------------------------

// Charts are inline SVG made with DOM calls: the page's CSP allows no inline
// style or script and nothing from other origins, and 168 bars need no
// library. Requests are summed in three kinds, drawn stacked from the bottom.
const KINDS = ['ok', 'refused', 'limited', 'guess']
const KIND_WORDS = {
  ok: ['call', 'calls'],
  refused: ['refused', 'refused'],
  limited: ['refused for a limit', 'refused for limits'],
  guess: ['wrong-secret guess', 'wrong-secret guesses']
}
const countOf = (n, kind) => plural(n, ...KIND_WORDS[kind])

/** ok: authenticated; guess: a wrong secret on a key's prefix; limited: over one of the key's limits; refused: every other refusal. */
function kindOf (outcome) {
  return outcome === 'ok' ? 'ok' : outcome === 'unknown_key' ? 'guess' : outcome === 'rate_limited' ? 'limited' : 'refused'
}

function emptySeries () {
  return Object.fromEntries(KINDS.map((kind) => [kind, new Array(CHART_HOURS).fill(0)]))
}

const total = (values, from = 0) => values.slice(from).reduce((a, b) => a + b, 0)

/** Starts the charts anew: they end at the server's current hour. Series read before are dropped. */
function resetUsage () {
  dropUsageReads()
  usage = { first: hourStart(Date.now() + clockOffset) - (CHART_HOURS - 1) * HOUR_MS, byKey: new Map(), byEndpoint: new Map() }
}

/**
 * One row's requests per hour over the charts' span: a key's (`keyId`) or
 * an endpoint's (`endpointId`), one call to the usage route for that row
 * alone, however large the project.
 */
async function readSeries (filter, id) {
  const from = new Date(usage.first).toISOString()
  const { rows } = await call('GET', `usage?granularity=hour&from=${encodeURIComponent(from)}&${filter}=${encodeURIComponent(id)}`)
  const series = emptySeries()
  for (const row of rows) {
    const hour = (Date.parse(row.start) - usage.first) / HOUR_MS
    if (hour >= 0 && hour < CHART_HOURS) series[kindOf(row.outcome)][hour] += row.count
  }
  return series
}

/**
 * The usage of the rows on screen, read as they come into view (a row below
 * the fold is read when it is scrolled to), USAGE_READS at a time; each chart
 * is drawn in the next animation frame with those that came in with it.
 */
const usageQueue = []
/** filter:id of the rows queued or being read, so a row is read once at a time */
const usageWanted = new Set()
let usageReads = 0
let whenUsageIdle = []

const USAGE_ROWS = {
  keyId: { map: () => usage.byKey, redraw: (id) => redrawKeyUsage(id) },
  endpointId: { map: () => usage.byEndpoint, redraw: (id) => redrawEndpointUsage(id) }
}

function queueUsage (filter, id) {
  const name = `${filter}:${id}`
  if (usageWanted.has(name)) return
  usageWanted.add(name)
  usageQueue.push([filter, id])
  pumpUsage()
}

function pumpUsage () {
  // Busy while charts are being read: assistive technology may wait for them.
  $('#workspace').setAttribute('aria-busy', String(usageQueue.length > 0 || usageReads > 0))
  while (usageReads < USAGE_READS && usageQueue.length > 0) {
    const [filter, id] = usageQueue.shift()
    const started = usage
    usageReads++
    readSeries(filter, id).catch((err) => ({ error: err.message })).then(async (series) => {
      if (usage !== started) return // the project was opened again meanwhile
      USAGE_ROWS[filter].map().set(id, series)
      await drawnInFrame(() => USAGE_ROWS[filter].redraw(id))
    }).finally(() => {
      usageReads--
      usageWanted.delete(`${filter}:${id}`)
      pumpUsage()
      if (usageReads === 0 && usageQueue.length === 0) {
        $('#workspace').setAttribute('aria-busy', 'false')
        for (const resolve of whenUsageIdle.splice(0)) resolve()
      }
    })
  }
}

/** Resolves once the rows on screen have their charts (the observer has had a frame to see them). */
async function usageSettled () {
  for (let i = 0; i < 2; i++) await new Promise((resolve) => requestAnimationFrame(resolve))
  await new Promise((resolve) => setTimeout(resolve, 0)) // the observer's callback runs after the frame
  if (usageReads > 0 || usageQueue.length > 0) await new Promise((resolve) => whenUsageIdle.push(resolve))
}

// A little ahead of the fold, so a row scrolled to is usually drawn already.
const usageObserver = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    if (!entry.isIntersecting) continue
    usageObserver.unobserve(entry.target)
    queueUsage(entry.target.dataset.usageFilter, entry.target.dataset.usageId)
  }
}, { rootMargin: '300px 0px' })

/** Has a usage cell's row read when it is on screen: when it has no series yet, or (`fresh`) always. */
function watchUsage (td, fresh) {
  const { usageFilter: filter, usageId: id } = td.dataset
  if (fresh || !USAGE_ROWS[filter].map().has(id)) usageObserver.observe(td)
}

/** Watches the usage cells in `root` (a table or a row). */
function watchRows (root, fresh) {
  for (const td of root.querySelectorAll('td.usage')) watchUsage(td, fresh)
}

/** Forgets what rows were waiting for (a project opened anew). */
function dropUsageReads () {
  usageObserver.disconnect()
  usageQueue.length = 0
  usageWanted.clear()
  $('#workspace').setAttribute('aria-busy', String(usageReads > 0))
}

let frameWork = []
/** Script time one frame gives to drawing charts; the rest waits for the next frame, so no task grows long. */
const FRAME_BUDGET_MS = 8

function runFrameWork () {
  const started = performance.now()
  do {
    const [run, done] = frameWork.shift()
    run()
    done()
  } while (frameWork.length > 0 && performance.now() - started < FRAME_BUDGET_MS)
  if (frameWork.length > 0) requestAnimationFrame(runFrameWork)
}

/** Runs `draw` in an animation frame, with as many others as fit its budget; resolves when it has run. */
function drawnInFrame (draw) {
  return new Promise((resolve) => {
    if (frameWork.length === 0) requestAnimationFrame(runFrameWork)
    frameWork.push([draw, resolve])
  })
}

const SVG_NS = 'http://www.w3.org/2000/svg'
const CHART_HEIGHT = 40
/** The least height of a bar's part, so one guess among hundreds of calls still shows. */
const MIN_PART = 3

function svgEl (tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag)
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value))
  node.append(...children)
  return node
}

function hourText (start, parts) {
  const counts = KINDS.filter((kind) => parts[kind] > 0).map((kind) => countOf(parts[kind], kind))
  return `${hourFormat.format(start)}: ${counts.join(', ')}`
}

/** What the chart shows, in words: its text equivalent. */
function chartSummary (subject, series, totals) {
  const week = total(series.ok)
  const parts = [`${subject}: ${countOf(week, 'ok')} in the last 7 days, ${total(series.ok, CHART_HOURS - 24)} in the last 24 hours`]
  for (const kind of ['refused', 'limited', 'guess']) {
    const n = total(series[kind])
    if (n > 0) parts.push(countOf(n, kind))
  }
  const peak = Math.max(...totals)
  if (peak > 0) {
    const hour = totals.indexOf(peak)
    parts.push(`busiest hour ${hourFormat.format(usage.first + hour * HOUR_MS)} with ${plural(peak, 'request', 'requests')}`)
  }
  return parts.join('; ')
}

/**
 * A bar per hour, scaled to the chart's busiest hour, each kind drawn as one
 * path: a page of 50 charts made of a rect per bar was some 25,000 elements,
 * and laying them out took most of the time to open a project. Each bar's
 * hour and counts are told by a title on hover; those are made when the
 * pointer first comes over the chart.
 */
function usageChart (subject, series) {
  const totals = series.ok.map((n, hour) => n + series.refused[hour] + series.limited[hour] + series.guess[hour])
  const scale = CHART_HEIGHT / Math.max(1, ...totals)
  const chart = svgEl('svg', {
    class: 'chart', viewBox: `0 0 ${CHART_HOURS} ${CHART_HEIGHT}`, preserveAspectRatio: 'none',
    role: 'img', 'aria-label': chartSummary(subject, series, totals)
  })
  // A faint line at each local midnight tells the days apart.
  let days = ''
  for (let hour = 1; hour < CHART_HOURS; hour++) {
    if (new Date(usage.first + hour * HOUR_MS).getHours() === 0) days += `M${hour} 0V${CHART_HEIGHT}`
  }
  if (days !== '') chart.append(svgEl('path', { class: 'day', d: days }))
  const bars = Object.fromEntries(KINDS.map((kind) => [kind, '']))
  for (let hour = 0; hour < CHART_HOURS; hour++) {
    let top = CHART_HEIGHT
    for (const kind of KINDS) {
      if (series[kind][hour] === 0) continue
      const height = Math.max(MIN_PART, series[kind][hour] * scale)
      top -= height
      bars[kind] += `M${hour} ${top}h1v${height}h-1z`
    }
  }
  for (const kind of KINDS) {
    if (bars[kind] !== '') chart.append(svgEl('path', { class: kind, d: bars[kind], 'data-count': total(series[kind]) }))
  }
  chart.append(svgEl('line', { class: 'axis', x1: 0, x2: CHART_HOURS, y1: CHART_HEIGHT, y2: CHART_HEIGHT }))
  chart.addEventListener('pointerenter', () => addHourTitles(chart, series, totals), { once: true })
  return chart
}

/** A hover target per hour with requests, whose title tells its hour and counts. */
function addHourTitles (chart, series, totals) {
  const first = usage.first
  for (let hour = 0; hour < CHART_HOURS; hour++) {
    if (totals[hour] === 0) continue
    const parts = Object.fromEntries(KINDS.map((kind) => [kind, series[kind][hour]]))
    chart.append(svgEl('g', { class: 'bar' }, svgEl('title', {}, hourText(first + hour * HOUR_MS, parts)),
      svgEl('rect', { class: 'hour', x: hour, y: 0, width: 1, height: CHART_HEIGHT })))
  }
}

/** The usage cell of a key or an endpoint: figures, warnings, the chart; a note while it is read. */
function usageCell (subject, series) {
  if (series === undefined) return [el('span', { className: 'empty reading', textContent: 'Reading usage…' })]
  if (series.error !== undefined) return [el('span', { className: 'empty', textContent: `Usage not available: ${series.error}` })]
  const figures = el('p', { className: 'figures' },
    '24 h: ', el('strong', { textContent: String(total(series.ok, CHART_HOURS - 24)) }),
    ' · 7 days: ', el('strong', { textContent: String(total(series.ok)) }), ` ${KIND_WORDS.ok[1]}`)
  const warnings = []
  const refused = total(series.refused)
  const guesses = total(series.guess)
  const limited = total(series.limited)
  if (refused > 0) warnings.push(el('span', { className: 'refused-count', textContent: countOf(refused, 'refused') }))
  if (limited > 0) warnings.push(el('span', { className: 'limited-count', textContent: countOf(limited, 'limited') }))
  if (guesses > 0) warnings.push(el('span', { className: 'guess-count', textContent: countOf(guesses, 'guess') }))
  const warningLine = warnings.length === 0 ? [] : [el('p', { className: 'figures' }, ...warnings.flatMap((w, i) => i === 0 ? [w] : [' ', w]))]
  return [figures, ...warningLine, usageChart(subject, series)]
}

// --- lists -----------------------------------------------------------------

// The keys and endpoints tables show a page of their list at a time
// (PAGE_SIZE rows), searched as the user types; the API reads only that page
// (limit, after, q). An action redraws its own row; nothing reloads the
// project. Each row's usage is read for that row alone, when it is on screen (watchUsage).

/** A table's list: its search, the page shown, the cursor of the next page and those back to the first. */
function newList () {
  return { q: '', items: [], at: undefined, before: [], after: null, generation: 0 }
}

let keyList = newList()
let endpointList = newList()
/** Every key the page has read, id -> prefix: the audit log names keys by them. */
const knownPrefixes = new Map()

/** Search text as the API compares it: A-Z in either case, every other character as itself. */
const fold = (text) => text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase())
const holds = (texts, q) => q === '' || texts.some((text) => fold(text).includes(fold(q)))

/** Reads a page of `list` and draws it; resolves once its rows' usage is drawn too. A later read wins. */
async function showPage (list, path, at, before, draw) {
  const generation = ++list.generation
  const page = await callPage(path, { limit: PAGE_SIZE, q: list.q, after: at })
  if (generation !== list.generation) return false
  Object.assign(list, { items: page.items, at, before, after: page.after })
  await draw()
  return true
}

/** The page after, or before, the one shown. */
function turnPage (list, path, draw, forward) {
  const before = [...list.before]
  const at = forward ? list.after : before.pop()
  if (forward) before.push(list.at)
  return showPage(list, path, at, before, draw)
}

/** A list's pager: shown when there is more than one page; "Page n". */
function renderPager (list, prefix) {
  const pager = $(`#${prefix}-pager`)
  const first = list.before.length === 0
  pager.hidden = first && list.after === null
  const focused = pager.contains(document.activeElement) ? document.activeElement : null
  $(`#${prefix}-previous`).disabled = first
  $(`#${prefix}-next`).disabled = list.after === null
  $(`#${prefix}-page`).textContent = `Page ${list.before.length + 1}`
  // A button that just became disabled keeps no focus: its neighbour takes it.
  if (focused?.disabled === true) (first ? $(`#${prefix}-next`) : $(`#${prefix}-previous`)).focus()
}

/** Runs `search` once the user stops typing for a moment. */
function searchAsYouType (input, search) {
  let timer = null
  input.addEventListener('input', () => {
    clearTimeout(timer)
    timer = setTimeout(search, 200)
  })
  input.addEventListener('keydown', (event) => {
    if (event.key !== 'Enter') return
    event.preventDefault() // no form submit: search now
    clearTimeout(timer)
    search()
  })
}

/**
 * Puts `row` where the row with the same data-id is, keeping the keyboard
 * focus on the same action; `heading` takes it when the row goes away (null).
 */
function replaceRow (table, id, row, heading) {
  const old = table.tBodies[0].querySelector(`tr[data-id="${CSS.escape(id)}"]`)
  if (old === null) return
  const hadFocus = old.contains(document.activeElement)
  const focused = hadFocus ? document.activeElement.dataset.focus : undefined
  if (row === null) old.remove()
  else old.replaceWith(row)
  if (row !== null) watchRows(row, false)
  if (!hadFocus) return
  const same = row === null || focused === undefined ? null : row.querySelector(`[data-focus="${CSS.escape(focused)}"]`)
  ;(same ?? heading).focus()
}

// --- keys ------------------------------------------------------------------

function lastUsed (updatedAt) {
  return updatedAt === null ? 'never' : timeEl(updatedAt)
}

const isExpired = (key, now) => key.expiresAt !== null && Date.parse(key.expiresAt) <= now

function keyState (key, now) {
  const reasons = [...(key.isActive ? [] : ['Disabled']), ...(isExpired(key, now) ? ['Expired'] : [])]
  return reasons.length === 0 ? ['Active', 'active'] : [reasons.join(', '), 'disabled']
}

/** When the key expires; flagged within EXPIRY_WARNING_MS. */
function expiryCell (key, now) {
  if (key.expiresAt === null) return [el('span', { className: 'empty', textContent: 'never' })]
  const left = Date.parse(key.expiresAt) - now
  if (left <= 0) return [timeEl(key.expiresAt), ' ', el('span', { className: 'flag expired', textContent: 'expired' })]
  if (left <= EXPIRY_WARNING_MS) return [timeEl(key.expiresAt), ' ', el('span', { className: 'flag soon', textContent: `expires ${timeLeft(left)}` })]
  return [timeEl(key.expiresAt)]
}

const LIMIT_WORDS = { requestsPerMinute: 'requests/min', concurrentDownloads: 'concurrent downloads', bytesPerDay: 'a day' }

/** Bytes as a person reads them: 10 GB, 1.5 MB. */
function byteText (n) {
  const units = ['bytes', 'kB', 'MB', 'GB', 'TB', 'PB']
  let i = 0
  let value = n
  while (value >= 1000 && i < units.length - 1) {
    value /= 1000
    i++
  }
  return `${i === 0 ? value : Number(value.toPrecision(3))} ${units[i]}`
}

/** Limits in one line: "60 requests/min, 2 concurrent downloads, 10 GB a day". */
function limitsText (limits) {
  const set = LIMIT_FIELDS.filter((name) => limits[name] !== null && limits[name] !== undefined)
  if (set.length === 0) return 'none'
  return set.map((name) => name === 'bytesPerDay' ? `${byteText(limits[name])} ${LIMIT_WORDS[name]}` : `${limits[name]} ${LIMIT_WORDS[name]}`).join(', ')
}

/** The key's limits, one line each; "none" without any. */
function limitsCell (key) {
  const set = LIMIT_FIELDS.filter((name) => key.limits[name] !== null)
  if (set.length === 0) return [el('span', { className: 'empty', textContent: 'none' })]
  return set.map((name) => el('div', {
    textContent: name === 'bytesPerDay' ? `${byteText(key.limits[name])} ${LIMIT_WORDS[name]}` : `${key.limits[name]} ${LIMIT_WORDS[name]}`
  }))
}

function rowButton (text, label, focusId, onClick, className = '') {
  return el('button', {
    type: 'button', textContent: text, className, attrs: { 'aria-label': label, 'data-focus': focusId }, onclick: onClick
  })
}

/**
 * A table cell that carries its column's name, shown beside it on a narrow
 * screen; its content is one box, so the name and the content make two columns.
 */
function cell (label, { attrs = {}, ...props } = {}, ...children) {
  return el('td', { ...props, attrs: { ...attrs, 'data-label': label } }, ...(children.length > 0 ? [el('div', {}, ...children)] : []))
}

function keyRow (key, now = Date.now()) {
  const [state, stateClass] = keyState(key, now)
  return el('tr', { attrs: { 'data-id': key.id } },
    cell('Prefix', {}, el('code', { className: 'prefix', textContent: key.prefix })),
    cell('Purpose', { textContent: key.purpose }),
    cell('State', { textContent: state, className: stateClass }),
    cell('Last used', {}, lastUsed(key.updatedAt)),
    cell('Expires', {}, ...expiryCell(key, now)),
    cell('Limits', { className: 'limits' }, ...limitsCell(key)),
    cell('Usage, last 7 days', { className: 'usage', attrs: { 'data-usage-filter': 'keyId', 'data-usage-id': key.id } },
      ...usageCell(`Key ${key.prefix}`, usage.byKey.get(key.id))),
    cell('Actions', { className: 'actions' },
      rowButton('Edit', `Edit key ${key.prefix}`, `${key.id}:edit`, () => editKey(key)),
      rowButton(key.isActive ? 'Disable' : 'Enable', `${key.isActive ? 'Disable' : 'Enable'} key ${key.prefix}`,
        `${key.id}:toggle`, () => toggleKey(key)),
      rowButton('Rotate', `Rotate key ${key.prefix}`, `${key.id}:rotate`, () => startRotation(key)),
      rowButton('Regenerate', `Regenerate key ${key.prefix}`, `${key.id}:regenerate`, () => regenerateKey(key)),
      rowButton('Delete', `Delete key ${key.prefix}`, `${key.id}:delete`, () => deleteKey(key), 'danger')))
}

/** Redraws one key's usage cell, once its series is read. */
function redrawKeyUsage (id) {
  const key = keyList.items.find((k) => k.id === id)
  const td = $('#keys-table').tBodies[0].querySelector(`tr[data-id="${CSS.escape(id)}"] td.usage`)
  if (key !== undefined && td !== null) td.replaceChildren(el('div', {}, ...usageCell(`Key ${key.prefix}`, usage.byKey.get(id))))
}

/** The keys' empty note: none in the project, or none that match. */
function renderKeysState () {
  const none = keyList.items.length === 0
  $('#keys-table').hidden = none
  $('#no-keys').hidden = !none
  $('#no-keys').textContent = keyList.q === '' ? 'No keys yet: create one above.' : `No key's prefix or purpose holds “${keyList.q}”.`
  renderPager(keyList, 'keys')
}

function renderKeys () {
  const now = Date.now()
  for (const key of keyList.items) knownPrefixes.set(key.id, key.prefix)
  replaceRows($('#keys-table'), keyList.items.map((key) => keyRow(key, now)), $('#keys-title'))
  renderKeysState()
}

/** Draws the page of keys; its rows' usage is read as they come on screen (`fresh`: read again). */
async function drawKeys (fresh = false) {
  renderKeys()
  watchRows($('#keys-table'), fresh)
  await usageSettled()
}

const showKeys = () => showPage(keyList, 'keys', undefined, [], drawKeys)

/** A key as the API now answers it: its row, the endpoints on screen that carry it, the assign form. */
function keyChanged (key) {
  knownPrefixes.set(key.id, key.prefix)
  const at = keyList.items.findIndex((k) => k.id === key.id)
  if (at >= 0) {
    keyList.items[at] = key
    replaceRow($('#keys-table'), key.id, keyRow(key), $('#keys-title'))
  }
  const summary = { id: key.id, prefix: key.prefix, purpose: key.purpose, isActive: key.isActive }
  for (const endpoint of endpointList.items) {
    const i = endpoint.keys.findIndex((k) => k.id === key.id)
    if (i < 0) continue
    endpoint.keys[i] = summary
    replaceRow($('#endpoints-table'), endpoint.id, endpointRow(endpoint), $('#endpoints-title'))
  }
  choiceChanged(key)
}

/** A key just made: shown at the end of the page when the search holds it (the list is oldest first). */
function keyAdded (key) {
  knownPrefixes.set(key.id, key.prefix)
  usage.byKey.set(key.id, emptySeries()) // no request made with it yet
  if (holds([key.prefix, key.purpose], keyList.q)) {
    keyList.items.push(key)
    $('#keys-table').tBodies[0].append(keyRow(key))
    renderKeysState()
  }
  if (holds([key.prefix, key.purpose], assign.q) && !assign.more) {
    assign.results.push(key)
    renderChoices()
  }
}

/** A key deleted: its row goes; the endpoints on screen lose it. */
function keyRemoved (id) {
  keyList.items = keyList.items.filter((k) => k.id !== id)
  replaceRow($('#keys-table'), id, null, $('#keys-title'))
  renderKeysState()
  for (const endpoint of endpointList.items) {
    if (!endpoint.keys.some((k) => k.id === id)) continue
    endpoint.keys = endpoint.keys.filter((k) => k.id !== id)
    replaceRow($('#endpoints-table'), endpoint.id, endpointRow(endpoint), $('#endpoints-title'))
  }
  assign.results = assign.results.filter((k) => k.id !== id)
  assign.chosen.delete(id)
  renderChoices()
}

searchAsYouType($('#keys-search'), () => {
  keyList.q = $('#keys-search').value.trim()
  attempt('Could not search the keys', () => showKeys())
})
$('#keys-next').addEventListener('click', () => attempt('Could not read the next page of keys', () => turnPage(keyList, 'keys', drawKeys, true)))
$('#keys-previous').addEventListener('click', () => attempt('Could not read the page of keys', () => turnPage(keyList, 'keys', drawKeys, false)))

function editKey (key) {
  editedKey = key
  const form = $('#edit-form')
  $('#edit-title').textContent = `Edit key ${key.prefix}`
  form.elements.purpose.value = key.purpose
  const expiry = form.elements.expiresAt
  expiry.value = key.expiresAt === null ? '' : localInputValue(key.expiresAt)
  expiry.dataset.unchanged = expiry.value
  for (const name of LIMIT_FIELDS) {
    form.elements[name].value = key.limits[name] === null ? '' : String(key.limits[name])
    checkField(form.elements[name])
  }
  checkField(form.elements.purpose)
  checkField(expiry)
  $('#edit-dialog').showModal()
}

async function toggleKey (key) {
  await attempt(`Could not ${key.isActive ? 'disable' : 'enable'} the key`, async () => {
    keyChanged(await call('PATCH', `keys/${encodeURIComponent(key.id)}`, { isActive: !key.isActive }))
    await refreshAudit()
    setStatus(`Key ${key.prefix} ${key.isActive ? 'disabled' : 'enabled'}.`)
  })
}

async function regenerateKey (key) {
  const ok = await confirmAction(`Regenerate key ${key.prefix} (${key.purpose})? Its current value stops working at once; ` +
    'its endpoints keep the key.', 'Regenerate')
  if (!ok) return
  await attempt('Could not regenerate the key', async () => {
    const renewed = await call('POST', `keys/${encodeURIComponent(key.id)}/regenerate`)
    const { key: value, ...record } = renewed
    keyChanged(record)
    await refreshAudit()
    setStatus(`Key ${renewed.prefix} regenerated; its old value no longer works.`)
    showKeyValue(`New value of key ${renewed.prefix}`, value)
  })
}

async function deleteKey (key) {
  const ok = await confirmAction(`Delete key ${key.prefix} (${key.purpose})? It stops working at once. ` +
    'Its endpoints stay, without this key.', 'Delete key')
  if (!ok) return
  await attempt('Could not delete the key', async () => {
    await call('DELETE', `keys/${encodeURIComponent(key.id)}`)
    keyRemoved(key.id)
    await refreshAudit()
    setStatus(`Key ${key.prefix} deleted.`)
  })
}

$('#create-key-form').addEventListener('submit', async (event) => {
  event.preventDefault()
  const form = event.target
  if (!recheck(form)) return
  const body = { purpose: form.elements.purpose.value }
  // Empty: no expiry asked for (the host's maxKeyLifetime may still set one).
  if (form.elements.expiresAt.value !== '') body.expiresAt = expiryOf(form.elements.expiresAt)
  await attempt('Could not create the key', async () => {
    const created = await call('POST', 'keys', body)
    form.reset()
    const { key: value, ...record } = created
    keyAdded(record)
    await refreshAudit()
    setStatus(`Key ${created.prefix} created.`)
    showKeyValue(`New API key ${created.prefix}`, value)
  })
})

// --- download links --------------------------------------------------------

/** The project's live links (not revoked, not expired), newest first. */
let liveLinks = []

function linkRow (link, now) {
  const prefix = knownPrefixes.get(link.keyId)
  const endpoint = endpointList.items.find((e) => e.id === link.endpointId)
  const params = Object.entries(link.params).map(([name, value]) => `${name}=${value}`).join(' ')
  const left = Date.parse(link.expiresAt) - now
  return el('tr', { attrs: { 'data-id': link.id } },
    cell('Key', {}, prefix === undefined ? el('span', { className: 'empty', textContent: 'a key not on this page' }) : el('code', { className: 'prefix', textContent: prefix })),
    cell('Endpoint', {}, endpoint === undefined ? el('span', { className: 'empty', textContent: 'an endpoint not on this page' }) : el('code', { textContent: endpoint.path })),
    cell('Parameters', {}, params === '' ? el('span', { className: 'empty', textContent: 'none (sql)' }) : el('code', { textContent: params })),
    cell('Expires', {}, timeEl(link.expiresAt), ' ', el('span', { className: 'flag soon', textContent: `in ${timeLeft(left)}` })),
    cell('Actions', { className: 'actions' },
      rowButton('Revoke', `Revoke link ${link.id}`, `${link.id}:revoke`, () => revokeLink(link, prefix), 'danger')))
}

function renderLinks () {
  const now = Date.now()
  const rows = liveLinks.filter((l) => Date.parse(l.expiresAt) > now).map((l) => linkRow(l, now))
  replaceRows($('#links-table'), rows, $('#links-title'))
  $('#links-table').hidden = rows.length === 0
  $('#no-links').hidden = rows.length > 0
}

/** The newest links the page reads: a bounded read, however many links a large project has made. */
const LINKS_READ = 100

/** Reads the project's newest links again; a host whose storage has none answers an empty list. */
async function drawLinks () {
  const { items } = await call('GET', `links?limit=${LINKS_READ}`)
  liveLinks = items.filter((l) => l.revokedAt === null)
  renderLinks()
}

async function revokeLink (link, prefix) {
  const ok = await confirmAction(`Revoke this download link${prefix === undefined ? '' : ` of key ${prefix}`}? ` +
    'Whoever holds its URL can no longer download with it.', 'Revoke link')
  if (!ok) return
  await attempt('Could not revoke the link', async () => {
    await call('DELETE', `links/${encodeURIComponent(link.id)}`)
    liveLinks = liveLinks.filter((l) => l.id !== link.id)
    renderLinks()
    await refreshAudit()
    setStatus('Download link revoked.')
  })
}

// --- endpoints -------------------------------------------------------------

/** How many of an endpoint's keys its row names; the rest are counted. */
const KEYS_NAMED = 10

function endpointKeys (endpoint) {
  if (endpoint.keys.length === 0) return el('span', { className: 'empty', textContent: 'none' })
  const named = endpoint.keys.slice(0, KEYS_NAMED)
  const rest = endpoint.keys.length - named.length
  return el('ul', { className: 'plain' }, ...named.map((k) => el('li', {},
    el('code', { textContent: k.prefix }), ` ${k.purpose}${k.isActive ? '' : ' (disabled)'}`)),
  ...(rest > 0 ? [el('li', { className: 'empty', textContent: `and ${plural(rest, 'more key', 'more keys')}` })] : []))
}

function endpointRow (e) {
  return el('tr', { attrs: { 'data-id': e.id } },
    cell('Path', {}, ...(e.resourceName === undefined ? [] : [el('span', { className: 'resource-name', textContent: e.resourceName })]),
      el('code', { textContent: e.path })),
    cell('Method', { textContent: e.method }),
    cell('Keys', {}, endpointKeys(e)),
    cell('Calls', { textContent: String(e.calls), className: 'number' }),
    cell('Usage, last 7 days', { className: 'usage', attrs: { 'data-usage-filter': 'endpointId', 'data-usage-id': e.id } },
      ...usageCell(`Endpoint ${e.path}`, usage.byEndpoint.get(e.id))),
    cell('Actions', { className: 'actions' },
      rowButton('Edit keys', `Edit keys of ${e.path}`, `${e.id}:edit`, () => editEndpoint(e)),
      rowButton('Delete', `Delete endpoint ${e.path}`, `${e.id}:delete`, () => deleteEndpoint(e), 'danger')))
}

function redrawEndpointUsage (id) {
  const endpoint = endpointList.items.find((e) => e.id === id)
  const td = $('#endpoints-table').tBodies[0].querySelector(`tr[data-id="${CSS.escape(id)}"] td.usage`)
  if (endpoint !== undefined && td !== null) td.replaceChildren(el('div', {}, ...usageCell(`Endpoint ${endpoint.path}`, usage.byEndpoint.get(id))))
}

function renderEndpointsState () {
  const none = endpointList.items.length === 0
  $('#endpoints-table').hidden = none
  $('#no-endpoints').hidden = !none
  $('#no-endpoints').textContent = endpointList.q === ''
    ? 'No endpoints yet: assign keys to a dataset or pipeline above.'
    : `No endpoint's path or name holds “${endpointList.q}”.`
  renderPager(endpointList, 'endpoints')
}

function renderEndpoints () {
  replaceRows($('#endpoints-table'), endpointList.items.map(endpointRow), $('#endpoints-title'))
  renderEndpointsState()
}

async function drawEndpoints (fresh = false) {
  renderEndpoints()
  watchRows($('#endpoints-table'), fresh)
  await usageSettled()
}

const showEndpoints = () => showPage(endpointList, 'endpoints', undefined, [], drawEndpoints)

/** The list's order: model sequence, type, resource sequence. */
const endpointOrder = (a, b) => a.modelSequence - b.modelSequence || (a.type < b.type ? -1 : a.type > b.type ? 1 : 0) ||
  a.resourceSequence - b.resourceSequence

/**
 * An endpoint as the API now answers it: its row redrawn, or, for a new
 * one that belongs on this page (the search holds it and it sorts before the
 * next page), a row in its place.
 */
function endpointChanged (endpoint) {
  const at = endpointList.items.findIndex((e) => e.id === endpoint.id)
  if (at >= 0) {
    endpointList.items[at] = endpoint
    replaceRow($('#endpoints-table'), endpoint.id, endpointRow(endpoint), $('#endpoints-title'))
    return
  }
  const items = endpointList.items
  const last = items[items.length - 1]
  const onThisPage = endpointList.after === null || (last !== undefined && endpointOrder(endpoint, last) < 0)
  if (!onThisPage || !holds([endpoint.path, endpoint.resourceName ?? ''], endpointList.q)) return
  const next = items.findIndex((e) => endpointOrder(endpoint, e) < 0)
  const row = endpointRow(endpoint)
  if (next < 0) {
    items.push(endpoint)
    $('#endpoints-table').tBodies[0].append(row)
  } else {
    $('#endpoints-table').tBodies[0].querySelector(`tr[data-id="${CSS.escape(items[next].id)}"]`).before(row)
    items.splice(next, 0, endpoint)
  }
  renderEndpointsState()
  watchRows(row, false)
}

function endpointRemoved (id) {
  endpointList.items = endpointList.items.filter((e) => e.id !== id)
  replaceRow($('#endpoints-table'), id, null, $('#endpoints-title'))
  renderEndpointsState()
}

searchAsYouType($('#endpoints-search'), () => {
  endpointList.q = $('#endpoints-search').value.trim()
  attempt('Could not search the endpoints', () => showEndpoints())
})
$('#endpoints-next').addEventListener('click', () =>
  attempt('Could not read the next page of endpoints', () => turnPage(endpointList, 'endpoints', drawEndpoints, true)))
$('#endpoints-previous').addEventListener('click', () =>
  attempt('Could not read the page of endpoints', () => turnPage(endpointList, 'endpoints', drawEndpoints, false)))

function endpointPath (e) {
  return `endpoints/${e.modelSequence}/${e.type}/${e.resourceSequence}`
}

/** " (sales)": the host's name of an endpoint's resource, when known. */
function nameSuffix (endpoint) {
  return endpoint.resourceName === undefined ? '' : ` (${endpoint.resourceName})`
}

function editEndpoint (endpoint) {
  const form = $('#assign-form')
  const picker = !$('#resource-picker').hidden
  if (picker) {
    const listed = resources.items.some((r) => placeOf(r) === placeOf(endpoint))
    renderPicker(listed ? placeOf(endpoint) : BY_NUMBERS)
  }
  fillNumbers(endpoint)
  pickResource()
  assign.chosen = new Map(endpoint.keys.map((k) => [k.id, k]))
  renderChoices()
  ;(picker ? form.elements.resource : form.elements.modelSequence).focus()
  setStatus(`Editing the keys of ${endpoint.path}${nameSuffix(endpoint)}: change the ticks, then Assign keys.`)
}

async function deleteEndpoint (endpoint) {
  const ok = await confirmAction(`Delete the endpoint ${endpoint.method} ${endpoint.path}${nameSuffix(endpoint)}? Its API access ends at once; ` +
    `the ${endpoint.type} itself stays.`, 'Delete endpoint')
  if (!ok) return
  await attempt('Could not delete the endpoint', async () => {
    await call('DELETE', endpointPath(endpoint))
    endpointRemoved(endpoint.id)
    await refreshAudit()
    setStatus(`Endpoint ${endpoint.path} deleted.`)
  })
}

// --- the assign form's keys ------------------------------------------------

// The keys that may call the resource: the chosen ones (ticked), and below
// them the first CHOICES keys of the project, or of a search as the user
// types. A project of 10,000 keys is searched, not listed.

let assign = { q: '', results: [], more: false, chosen: new Map(), generation: 0 }

const choiceLabel = (key) => ` ${key.prefix} — ${key.purpose}${key.isActive ? '' : ' (disabled)'}`

function renderChoices () {
  const shown = [...assign.chosen.values(), ...assign.results.filter((k) => !assign.chosen.has(k.id))]
  const choices = shown.map((key) => el('label', { className: 'choice' },
    el('input', { type: 'checkbox', name: 'keyIds', value: key.id, checked: assign.chosen.has(key.id) }), choiceLabel(key)))
  const empty = assign.q === '' ? 'No keys yet.' : `No key's prefix or purpose holds “${assign.q}”.`
  $('#assign-choices').replaceChildren(...(choices.length > 0 ? choices : [el('p', { className: 'empty', textContent: empty })]))
  $('#assign-more').hidden = !assign.more
  $('#assign-more').textContent = assign.more
    ? `${assign.q === '' ? `The project's first ${CHOICES} keys` : `The first ${CHOICES} matches`} are shown: type part of a prefix or purpose to find others.`
    : ''
}

/** A key whose fields changed, in the choices and among the chosen. */
function choiceChanged (key) {
  const at = assign.results.findIndex((k) => k.id === key.id)
  if (at < 0 && !assign.chosen.has(key.id)) return
  if (at >= 0) assign.results[at] = key
  if (assign.chosen.has(key.id)) assign.chosen.set(key.id, key)
  renderChoices()
}

async function searchChoices () {
  const generation = ++assign.generation
  const q = $('#assign-search').value.trim()
  const page = await callPage('keys', { limit: CHOICES, q })
  if (generation !== assign.generation) return
  Object.assign(assign, { q, results: page.items, more: page.after !== null })
  for (const key of page.items) knownPrefixes.set(key.id, key.prefix)
  renderChoices()
}

searchAsYouType($('#assign-search'), () => attempt('Could not search the keys', searchChoices))
$('#assign-choices').addEventListener('change', (event) => {
  const box = event.target
  if (box.name !== 'keyIds') return
  if (!box.checked) return assign.chosen.delete(box.value)
  const key = assign.results.find((k) => k.id === box.value)
  if (key !== undefined) assign.chosen.set(key.id, key)
})

$('#assign-form').addEventListener('submit', async (event) => {
  event.preventDefault()
  const form = event.target
  // Plain digits, as the API wants them: 01 and 1e3 go as 1 and 1000.
  const target = {
    modelSequence: String(form.elements.modelSequence.valueAsNumber),
    type: form.elements.type.value,
    resourceSequence: String(form.elements.resourceSequence.valueAsNumber)
  }
  const keyIds = [...assign.chosen.keys()]
  await attempt('Could not assign the keys', async () => {
    const endpoint = await call('PUT', endpointPath(target), { keyIds })
    endpointChanged(endpoint)
    await refreshAudit()
    setStatus(`Endpoint ${endpoint.method} ${endpoint.path} now has ${endpoint.keys.length} key(s).`)
  })
})

// --- resource picker -------------------------------------------------------

// A host that lists its datasets and pipelines (listResources) gets a picker
// by name, which fills the number fields; they stay the form's source of
// truth, and come back for a resource the host does not list, or when the
// host lists nothing.

const BY_NUMBERS = 'numbers'

/** The host's datasets and pipelines, or { items: [], error } when the resources route failed. */
let resources = { items: [] }

/** A resource's place, as the picker's option value: `dataset/1/2`. */
const placeOf = (r) => `${r.type}/${r.modelSequence}/${r.resourceSequence}`

const resourceLabel = (r) => `${r.name} — model ${r.modelSequence}, ${r.type} ${r.resourceSequence}`

async function loadResources () {
  try {
    resources = { items: (await call('GET', 'resources')).items }
  } catch (err) {
    resources = { items: [], error: err.message }
  }
  renderPicker()
}

function fillNumbers (r) {
  const form = $('#assign-form')
  form.elements.modelSequence.value = r.modelSequence
  form.elements.type.value = r.type
  form.elements.resourceSequence.value = r.resourceSequence
  checkField(form.elements.modelSequence)
  checkField(form.elements.resourceSequence)
}

/** Shows the number fields when they are what the user fills in; a named choice fills them. */
function pickResource () {
  const value = $('#assign-form').elements.resource.value
  $('#resource-numbers').hidden = !$('#resource-picker').hidden && value !== BY_NUMBERS
  const chosen = resources.items.find((r) => placeOf(r) === value)
  if (chosen !== undefined) fillNumbers(chosen)
}
$('#assign-form').elements.resource.addEventListener('change', pickResource)

/**
 * The picker's options, grouped by type: every resource the host lists, or
 * when it lists more than RESOURCE_CHOICES, the first of them that match the
 * search (a select of 2,000 options costs the browser most of a second to
 * style and lay out). `keep` (a place) stays listed and chosen, as does the
 * current choice when it is still listed.
 */
function renderPicker (keep = $('#assign-form').elements.resource.value) {
  const select = $('#assign-form').elements.resource
  const listed = resources.items.length > 0
  $('#resource-picker').hidden = !listed
  select.disabled = !listed // a hidden required field would block the form
  const note = $('#resource-note')
  note.hidden = resources.error === undefined
  note.textContent = note.hidden ? '' : `The application's names for its datasets and pipelines could not be read (${resources.error}): enter the numbers.`
  const searching = resources.items.length > RESOURCE_CHOICES
  $('#resource-find').hidden = !searching
  const q = searching ? $('#resource-search').value.trim().toLowerCase() : ''
  const matches = []
  for (const r of resources.items) {
    if (matches.length === RESOURCE_CHOICES) break
    if (q === '' || resourceLabel(r).toLowerCase().includes(q)) matches.push(r)
  }
  const kept = resources.items.find((r) => placeOf(r) === keep)
  if (kept !== undefined && !matches.includes(kept)) matches.unshift(kept)
  const group = (type, label) => {
    const items = matches.filter((r) => r.type === type)
    return items.length === 0 ? [] : [el('optgroup', { label }, ...items.map((r) => el('option', { value: placeOf(r), textContent: resourceLabel(r) })))]
  }
  const first = searching
    ? (q === '' ? `Choose one (the first ${RESOURCE_CHOICES} of ${resources.items.length}: search for others)…` : `Choose one of ${matches.length === RESOURCE_CHOICES ? `the first ${RESOURCE_CHOICES}` : matches.length} matching “${q}”…`)
    : 'Choose one…'
  select.replaceChildren(...(listed
    ? [el('option', { value: '', textContent: first }), ...group('dataset', 'Datasets (GET)'), ...group('pipeline', 'Pipelines (POST)'),
        el('option', { value: BY_NUMBERS, textContent: 'Another, by its numbers…' })]
    : []))
  select.value = kept !== undefined || keep === BY_NUMBERS ? keep : ''
  pickResource()
}
searchAsYouType($('#resource-search'), () => renderPicker())

// --- rotation --------------------------------------------------------------

// SPEC §3.2's recipe as one flow: create a new key; assign old and new keys;
// move clients to the new key; check usage; remove the old key.
//
// "Check usage" needs the old key's calls since the rotation began, but the
// usage history counts by hour. So at the start the page reads the old key's
// counts from the hour before (the route flushes pending counts first, so
// they are exact at that moment) and keeps them as a baseline; every check
// reads the same range again and shows the difference. The hour before, not
// the current one, so a browser clock up to an hour off the server's changes
// nothing. The rotation (key ids, baseline, what was assigned; never a key
// value) is kept in sessionStorage, so a reload resumes it.

const ROTATION_CHECK_MS = 2000
const TABLES_EVERY_CHECKS = 5

/** The rotation under way in this project, or null; mirrored in sessionStorage. */
let rotation = null
/** What the checks saw; not kept across a reload. */
let watch = null
let checkTimer = null

const rotationStorageKey = () => `data-endpoints-rotation:${encodeURIComponent(project.organization)}/${encodeURIComponent(project.project)}`

function saveRotation () {
  if (rotation === null) sessionStorage.removeItem(rotationStorageKey())
  else sessionStorage.setItem(rotationStorageKey(), JSON.stringify(rotation))
}

function readRotation () {
  try {
    return JSON.parse(sessionStorage.getItem(rotationStorageKey()) ?? 'null')
  } catch {
    return null
  }
}

/** A key's requests from `from` on, by kind. */
async function keyCounts (keyId, from) {
  const query = `usage?granularity=hour&keyId=${encodeURIComponent(keyId)}&from=${encodeURIComponent(from)}`
  const counts = { ok: 0, refused: 0, limited: 0, guess: 0 }
  for (const row of (await call('GET', query)).rows) counts[kindOf(row.outcome)] += row.count
  return counts
}

async function startRotation (key) {
  if (rotation !== null) {
    showError('Could not start the rotation', new Error(`finish or stop the rotation of key ${rotation.old.prefix} first`))
    $('#rotation-title').focus()
    return
  }
  // Read fresh: the key may have been put on an endpoint since the page loaded.
  let on = []
  const read = await attempt('Could not start the rotation', async () => {
    on = await callAll('endpoints', { keyId: key.id })
  })
  if (!read) return
  const ok = await confirmAction(`Rotate key ${key.prefix} (${key.purpose})? A new key with the same purpose is made and added to ` +
    `the ${plural(on.length, 'endpoint', 'endpoints')} the old key is on; its value is shown once. ` +
    'Then move your clients to the new key while this page counts the old key\'s calls, and remove the old key when they stop. ' +
    'The old key keeps working until you remove it.', 'Start rotation')
  if (!ok) return
  await attempt('Could not start the rotation', async () => {
    const startedAt = Date.now()
    const from = new Date(hourStart(startedAt) - HOUR_MS).toISOString()
    const baseline = await keyCounts(key.id, from)
    const created = await call('POST', 'keys', { purpose: key.purpose })
    const { key: value, ...record } = created
    keyAdded(record)
    rotation = {
      old: { id: key.id, prefix: key.prefix, purpose: key.purpose },
      new: { id: created.id, prefix: created.prefix },
      startedAt: new Date(startedAt).toISOString(),
      from,
      baseline,
      endpoints: on.map((e) => ({ id: e.id, path: e.path, modelSequence: e.modelSequence, type: e.type, resourceSequence: e.resourceSequence, state: 'pending', message: '' })),
      removedAt: null
    }
    watch = { checks: 0, checkedAt: null, old: null, new: null, steady: 0, problem: '' }
    saveRotation()
    renderRotation()
    checkRotation()
    showKeyValue(`New key ${created.prefix}, replacing ${key.prefix}`, value)
    await assignNewKey()
    await refreshAudit()
  })
}

/**
 * Step 1: the new key goes on every endpoint the old key is on, one call
 * each that adds it to the endpoint's keys (none is read and sent back, so
 * a change made meanwhile is kept). A failure is kept on its endpoint, the
 * others go on.
 */
async function assignNewKey () {
  const run = rotation // a rotation stopped meanwhile is left alone
  const todo = run.endpoints.filter((e) => e.state !== 'done')
  const settle = (target, state, message = '') => {
    Object.assign(target, { state, message })
    if (run === rotation) {
      saveRotation()
      renderRotation()
    }
  }
  for (const target of todo) {
    try {
      endpointChanged(await call('POST', `${endpointPath(target)}/keys/${encodeURIComponent(run.new.id)}`))
      settle(target, 'done')
    } catch (err) {
      settle(target, 'failed', err.status === 404 && err.message === 'Endpoint not found' ? 'the endpoint was deleted meanwhile' : err.message)
    }
  }
  if (run !== rotation) return
  const failed = run.endpoints.filter((e) => e.state !== 'done')
  if (failed.length === 0) {
    setStatus(`New key ${run.new.prefix} added to ${plural(run.endpoints.length, 'endpoint', 'endpoints')}.`)
  } else {
    showError('Could not add the new key everywhere', new Error(`not added to ${failed.map((e) => e.path).join(', ')}; see the rotation above and try again`))
  }
}

/** Step 2: one check of both keys' calls since the start; the next follows ROTATION_CHECK_MS after it ends. */
async function checkRotation () {
  clearTimeout(checkTimer)
  checkTimer = null
  if (rotation === null || rotation.removedAt !== null) return
  const checked = rotation
  try {
    const [old, renewed] = await Promise.all([keyCounts(checked.old.id, checked.from), keyCounts(checked.new.id, checked.from)])
    if (checked !== rotation) return
    const since = Object.fromEntries(KINDS.map((kind) => [kind, old[kind] - checked.baseline[kind]]))
    const same = watch.old !== null && KINDS.every((kind) => since[kind] === watch.old[kind])
    Object.assign(watch, { checks: watch.checks + 1, checkedAt: Date.now(), old: since, new: renewed, problem: '', steady: same ? watch.steady + 1 : 0 })
    // The tables below follow too, less often: they cost three reads.
    if (watch.checks % TABLES_EVERY_CHECKS === 0) refreshTables().catch(() => {})
  } catch (err) {
    if (checked !== rotation) return
    watch.problem = err.message
  }
  renderWatch()
  if (checked === rotation && rotation.removedAt === null) checkTimer = setTimeout(checkRotation, ROTATION_CHECK_MS)
}

/** Step 3, confirmed: the old key is deleted; clients still on it get 403 from now on. */
async function removeOldKey () {
  const missing = rotation.endpoints.filter((e) => e.state !== 'done')
  const calls = watch.old === null ? '' : ` It had ${countOf(watch.old.ok, 'ok')} since the rotation began` +
    (watch.steady > 0 ? `, none in the last ${plural(watch.steady, 'check', 'checks')}.` : ', and its count was still changing at the last check.')
  const gap = missing.length === 0 ? '' : ` The new key is not on ${missing.map((e) => e.path).join(', ')}: clients there lose access.`
  const ok = await confirmAction(`Remove the old key ${rotation.old.prefix} (${rotation.old.purpose})?${calls}${gap} ` +
    'It stops working at once; this cannot be undone.', 'Remove old key')
  if (!ok) return
  const removing = rotation
  await attempt('Could not remove the old key', async () => {
    try {
      await call('DELETE', `keys/${encodeURIComponent(removing.old.id)}`)
    } catch (err) {
      if (err.status !== 404) throw err // 404: already deleted, which is what was asked
    }
    removing.removedAt = new Date().toISOString()
    clearTimeout(checkTimer)
    if (removing === rotation) {
      saveRotation()
      renderRotation()
    }
    keyRemoved(removing.old.id)
    await refreshAudit()
    setStatus(`Old key ${removing.old.prefix} removed; the rotation is complete.`)
    $('#rotation-title').focus()
  })
}

function stopRotation () {
  const ended = rotation
  clearTimeout(checkTimer)
  rotation = null
  watch = null
  saveRotation()
  renderRotation()
  if (ended.removedAt === null) setStatus(`Rotation of key ${ended.old.prefix} stopped; both keys stay as they are.`)
  $('#keys-title').focus()
}
$('#rotation-stop').addEventListener('click', stopRotation)

/** After a reload: an endpoint left pending may or may not have the new key; the new key's endpoints say which. */
async function resumeRotation () {
  clearTimeout(checkTimer)
  rotation = readRotation()
  watch = { checks: 0, checkedAt: null, old: null, new: null, steady: 0, problem: '' }
  const pending = rotation?.endpoints.filter((e) => e.state === 'pending') ?? []
  if (pending.length > 0) {
    const run = rotation
    const withNew = new Set((await callAll('endpoints', { keyId: run.new.id }).catch(() => [])).map((e) => e.id))
    if (run !== rotation) return
    for (const target of pending) {
      Object.assign(target, withNew.has(target.id) ? { state: 'done', message: '' } : { state: 'failed', message: 'not added: the page was left before it was' })
    }
  }
  if (rotation !== null) saveRotation()
  renderRotation()
  if (rotation !== null) checkRotation()
}

/**
 * Draws the whole rotation. The checks redraw only the figures
 * (renderWatch), which hold nothing focusable, so a keyboard user's focus on
 * a button of the panel is never taken away.
 */
function renderRotation () {
  $('#rotation').hidden = rotation === null
  if (rotation === null) return
  const { old, endpoints } = rotation
  const added = endpoints.filter((e) => e.state === 'done').length
  const failed = endpoints.filter((e) => e.state === 'failed')
  $('#rotation-title').textContent = `Rotating key ${old.prefix} (${old.purpose})`

  $('#rotation-new').replaceChildren(
    el('h3', { textContent: 'A new key with the same endpoints' }),
    el('p', {}, 'New key ', el('code', { textContent: rotation.new.prefix }), ', same purpose; its value was shown once ' +
      '(if it was lost, regenerate the new key). ',
    endpoints.length === 0
      ? 'The old key is on no endpoint: there was nothing to add.'
      : `Added to ${added} of the old key's ${plural(endpoints.length, 'endpoint', 'endpoints')}:`),
    ...(endpoints.length === 0
      ? []
      : [el('ul', { className: 'assignments' }, ...endpoints.map((e) => el('li', { className: e.state },
          e.state === 'done' ? '✓ added to ' : e.state === 'pending' ? '… adding to ' : '✗ not added to ',
          el('code', { textContent: e.path }), e.message === '' ? '' : `: ${e.message}`)))]),
    ...(failed.length === 0 || rotation.removedAt !== null
      ? []
      : [el('button', {
          type: 'button', textContent: `Try again on ${plural(failed.length, 'endpoint', 'endpoints')}`,
          onclick: () => attempt('Could not add the new key', async () => { await assignNewKey(); await refreshAudit() })
        })]))

  $('#rotation-watch').replaceChildren(
    el('h3', { textContent: 'Move your clients to the new key' }),
    el('p', {}, 'Calls since the rotation began at ',
      el('time', { dateTime: rotation.startedAt, textContent: clockFormat.format(new Date(rotation.startedAt)) }),
      `, refreshed every ${ROTATION_CHECK_MS / 1000} seconds (the tables below every ${TABLES_EVERY_CHECKS * ROTATION_CHECK_MS / 1000}):`),
    el('div', { id: 'rotation-live' }))
  renderWatch()

  $('#rotation-remove').replaceChildren(
    el('h3', { textContent: 'Remove the old key' }),
    ...(rotation.removedAt !== null
      ? [el('p', {}, 'Old key ', el('code', { textContent: old.prefix }), ' removed at ',
          el('time', { dateTime: rotation.removedAt, textContent: clockFormat.format(new Date(rotation.removedAt)) }), '. The rotation is complete.')]
      : [el('p', { textContent: 'When the old key\'s count stays the same, no client uses it any more.' }),
          el('button', { type: 'button', className: 'danger', textContent: `Remove old key ${old.prefix}`, onclick: removeOldKey })]))
  $('#rotation-stop').textContent = rotation.removedAt === null ? 'Stop the rotation' : 'Close'
  $('#rotation-stop').setAttribute('aria-label', rotation.removedAt === null
    ? `Stop the rotation of key ${old.prefix}; both keys stay`
    : 'Close the finished rotation')
}

/** The live figures of step 2: both keys' calls since the start, and how the checks went. */
function renderWatch () {
  const figures = []
  if (watch.old !== null) {
    const extra = (kind) => watch.old[kind] > 0 ? [', ', el('span', { className: `${kind === 'guess' ? 'guess' : 'refused'}-count`, textContent: countOf(watch.old[kind], kind) })] : []
    figures.push(el('dl', { className: 'live' },
      el('dt', {}, 'Old key ', el('code', { textContent: rotation.old.prefix })),
      el('dd', {}, el('strong', { id: 'rotation-old-calls', textContent: String(watch.old.ok) }), ` ${KIND_WORDS.ok[1]}`, ...extra('refused'), ...extra('guess')),
      el('dt', {}, 'New key ', el('code', { textContent: rotation.new.prefix })),
      el('dd', {}, el('strong', { id: 'rotation-new-calls', textContent: String(watch.new.ok) }), ` ${KIND_WORDS.ok[1]}`)))
  }
  const progress = rotation.removedAt !== null
    ? 'The old key is removed: its calls are no longer counted here.'
    : watch.checks === 0
      ? 'Checking…'
      : `Checked ${plural(watch.checks, 'time', 'times')} since this page opened, last at ${clockFormat.format(new Date(watch.checkedAt))}; ` +
        (watch.steady === 0 ? 'the old key\'s count changed at the last check.' : `the old key's count has not changed in the last ${plural(watch.steady, 'check', 'checks')}.`)
  $('#rotation-live').replaceChildren(...figures,
    el('p', { id: 'rotation-checked', className: 'help', textContent: progress, attrs: { 'data-checks': String(watch.checks) } }),
    ...(watch.problem === '' ? [] : [el('p', { className: 'error', textContent: `Could not check the usage: ${watch.problem}` })]))
}

// --- audit log -------------------------------------------------------------

// The project's audit log, a page at a time. After each change the page
// reads the newest page again and puts the entries it did not have on top,
// so the older pages the user opened stay; only when more changed than a
// page holds does it start again from the newest.

const AUDIT_PAGE = 25

/** The entries shown, newest first; `next`: the cursor of the page after them, null at the start of the log. */
let audit = { items: [], next: null, error: undefined, generation: 0 }
let readingOlder = false

function resetAudit () {
  audit = { items: [], next: null, error: undefined, generation: audit.generation + 1 }
}

const newestAudit = () => call('GET', `audit?limit=${AUDIT_PAGE}`)

/** Adds the newest page (or { error }) to what is shown. */
function mergeAudit (page) {
  if (page.error !== undefined) {
    audit.error = page.error // what was read before stays
    return
  }
  audit.error = undefined
  const known = new Set(audit.items.map((entry) => entry.id))
  const fresh = []
  for (const entry of page.items) {
    if (known.has(entry.id)) break
    fresh.push(entry)
  }
  if (fresh.length < page.items.length) {
    audit.items = [...fresh, ...audit.items]
  } else {
    // Nothing in common: a first read, or a gap that one page does not bridge.
    Object.assign(audit, { items: page.items, next: page.next, generation: audit.generation + 1 })
  }
}

async function olderEntries () {
  if (readingOlder || audit.next === null) return
  readingOlder = true
  const { generation, next } = audit
  await attempt('Could not read older entries of the audit log', async () => {
    const page = await call('GET', `audit?before=${encodeURIComponent(next)}&limit=${AUDIT_PAGE}`)
    if (generation !== audit.generation || next !== audit.next) return // started again meanwhile
    const known = new Set(audit.items.map((entry) => entry.id))
    const older = page.items.filter((entry) => !known.has(entry.id))
    audit.items.push(...older)
    audit.next = page.next
    renderAudit()
    setStatus(`Audit log: ${plural(older.length, 'older entry', 'older entries')} shown${audit.next === null ? '; that is the start of the log' : ''}.`)
    // The button is gone at the start of the log: the focus goes to the first entry it brought.
    if (audit.next === null && older.length > 0) $('#audit-table').querySelector(`[data-focus="${CSS.escape(`${older[0].id}:entry`)}"]`).focus()
  }).finally(() => { readingOlder = false })
}
$('#audit-older').addEventListener('click', olderEntries)

/** "2026-11-23 18:04:05 UTC", for a title beside the local time. */
const utcText = (iso) => `${new Date(iso).toISOString().replace('T', ' ').replace(/\.\d+Z$/, '')} UTC`

function auditTime (iso) {
  return el('time', { dateTime: iso, title: utcText(iso), textContent: new Date(iso).toLocaleString() })
}

/** A key as the log names it: its prefix when the page knows it, else its id. */
function keyRef (id, prefixes) {
  const prefix = prefixes.get(id)
  return prefix === undefined
    ? el('code', { textContent: id, title: 'key id: this page does not know the key\'s prefix' })
    : el('code', { className: 'prefix', textContent: prefix })
}

/** "a", "a and b", "a, b and c", with nodes in between. */
function listOf (nodes) {
  return nodes.flatMap((node, i) => i === 0 ? [node] : [i === nodes.length - 1 ? ' and ' : ', ', node])
}

const keyRefs = (ids, prefixes) => ids.length === 0 ? ['none'] : listOf(ids.map((id) => keyRef(id, prefixes)))

/** The host's name of the resource at an endpoint path, when the page knows it. */
function resourceNameAt (path) {
  const endpoint = endpointList.items.find((e) => e.path === path)
  if (endpoint?.resourceName !== undefined) return endpoint.resourceName
  const match = /\/model\/(\d+)\/(dataset|pipeline)\/(\d+)$/.exec(path)
  return match === null ? undefined : resources.items.find((r) => placeOf(r) === `${match[2]}/${match[1]}/${match[3]}`)?.name
}

/** What happened, as a sentence: "Key ab12cd34ef disabled", "Endpoint /api/… keys changed: added x, removed y". */
function auditSentence (entry, prefixes) {
  const { action, changes, target } = entry
  const key = (...rest) => ['Key ', el('code', { className: 'prefix', textContent: target }), ...rest]
  const name = resourceNameAt(target)
  const endpoint = (...rest) => ['Endpoint ', el('code', { textContent: target }), ...(name === undefined ? [] : [` (${name})`]), ...rest]
  const keyIds = changes.keyIds ?? { from: [], to: [] }
  switch (action) {
    case 'key.created': return key(' created')
    case 'key.updated': {
      const fields = Object.keys(changes)
      if (fields.length === 1 && fields[0] === 'isActive') return key(changes.isActive.to ? ' enabled' : ' disabled')
      return key(' edited')
    }
    case 'key.regenerated':
      return ['Key ', el('code', { className: 'prefix', textContent: changes.prefix?.from ?? '?' }), ' regenerated as ',
        el('code', { className: 'prefix', textContent: target })]
    case 'key.deleted': return key(' deleted')
    case 'endpoint.created': return endpoint(' created with ', ...(keyIds.to.length === 1 ? ['key '] : ['keys ']), ...keyRefs(keyIds.to, prefixes))
    case 'endpoint.updated': {
      const added = keyIds.to.filter((id) => !keyIds.from.includes(id))
      const removed = keyIds.from.filter((id) => !keyIds.to.includes(id))
      const parts = [...(added.length > 0 ? [['added ', ...listOf(added.map((id) => keyRef(id, prefixes)))]] : []),
        ...(removed.length > 0 ? [['removed ', ...listOf(removed.map((id) => keyRef(id, prefixes)))]] : [])]
      return endpoint(' keys changed: ', ...parts.flatMap((part, i) => i === 0 ? part : [', ', ...part]))
    }
    case 'endpoint.deleted': return endpoint(' deleted')
    case 'link.created': return ['Download link ', el('code', { textContent: target }), ' minted', ...(entry.keyId === null ? [] : [' with ', keyRef(entry.keyId, prefixes)])]
    case 'link.revoked': return ['Download link ', el('code', { textContent: target }), ' revoked']
    default: return [`${action} `, el('code', { textContent: target })]
  }
}

const FIELD_NAMES = { purpose: 'Purpose', isActive: 'State', expiresAt: 'Expires', limits: 'Limits', prefix: 'Prefix', keyIds: 'Keys', params: 'Parameters', revokedAt: 'Revoked' }

/** A field's value as the page shows it. */
function fieldValue (field, value, prefixes) {
  switch (field) {
    case 'purpose': return value === null ? ['—'] : [`“${value}”`]
    case 'isActive': return [value === null ? '—' : value ? 'active' : 'disabled']
    case 'expiresAt': return [value === null ? 'never' : auditTime(value)]
    case 'prefix': return [value === null ? '—' : el('code', { className: 'prefix', textContent: value })]
    case 'keyIds': return keyRefs(value ?? [], prefixes)
    case 'limits': return [value === null ? 'none' : limitsText(value)]
    case 'revokedAt': return [value === null ? '—' : auditTime(value)]
    case 'params': return [value === null ? '—' : el('code', { textContent: Object.entries(value).map(([n, v]) => `${n}=${v}`).join(' ') || 'none' })]
    default: return [JSON.stringify(value)]
  }
}

/** Each changed field, old → new; a creation shows only the new values, a deletion only the old. */
function auditFields (entry, prefixes) {
  const created = entry.action.endsWith('.created')
  const deleted = entry.action.endsWith('.deleted')
  const lines = Object.entries(entry.changes).map(([field, { from, to }]) => el('li', {},
    `${FIELD_NAMES[field] ?? field}: `,
    ...(created
      ? fieldValue(field, to, prefixes)
      : deleted
        ? fieldValue(field, from, prefixes)
        : [...fieldValue(field, from, prefixes), ' → ', ...fieldValue(field, to, prefixes)])))
  return lines.length === 0 ? [] : [el('ul', { className: 'plain' }, ...lines)]
}

function renderAudit () {
  // Keys are named by the prefix they had at the time of each entry:
  // walking back from now, a regeneration hands back the prefix before it.
  // The page knows the keys it has read; others show by id.
  const prefixes = new Map(knownPrefixes)
  const rows = audit.items.map((entry) => {
    const row = el('tr', {},
      cell('Time', { attrs: { tabindex: '-1', 'data-focus': `${entry.id}:entry` } }, auditTime(entry.at)),
      entry.actor === null
        ? cell('Actor', {}, el('span', { className: 'empty', textContent: '—', title: 'the application names no actor' }))
        : cell('Actor', { textContent: entry.actor }),
      cell('Change', {}, ...auditSentence(entry, prefixes)),
      cell('Fields, old → new', {}, ...auditFields(entry, prefixes)))
    // A key entry's target is the key's prefix (a link entry's is the link's id).
    if (entry.keyId !== null && entry.action.startsWith('key.')) {
      prefixes.set(entry.keyId, entry.action === 'key.regenerated' ? entry.changes.prefix?.from ?? entry.target : entry.target)
    }
    return row
  })
  replaceRows($('#audit-table'), rows, $('#audit-title'))
  $('#no-audit').hidden = rows.length > 0 || audit.error !== undefined
  $('#audit-problem').hidden = audit.error === undefined
  $('#audit-problem').textContent = audit.error === undefined ? '' : `The audit log could not be read: ${audit.error}`
  $('#audit-older').hidden = audit.next === null
  $('#audit-count').textContent = rows.length === 0
    ? ''
    : audit.next === null ? `All ${plural(rows.length, 'entry', 'entries')}.` : `The newest ${plural(rows.length, 'entry', 'entries')}.`
}

// --- project ---------------------------------------------------------------

/**
 * Opens the project: the first page of keys and of endpoints, the newest
 * audit entries, then the usage of the rows on screen. Nothing else is read:
 * a project of 10,000 keys opens as fast as one of 10.
 */
async function load () {
  for (const search of ['#keys-search', '#endpoints-search', '#assign-search']) $(search).value = ''
  keyList = newList()
  endpointList = newList()
  assign = { q: '', results: [], more: false, chosen: new Map(), generation: assign.generation + 1 }
  const [keyPage, endpointPage, auditNow] = await Promise.all([
    callPage('keys', { limit: PAGE_SIZE }), callPage('endpoints', { limit: PAGE_SIZE }),
    // Keys and endpoints are shown without the log if its route refuses.
    newestAudit().catch((err) => ({ error: err.message }))
  ])
  resetUsage()
  Object.assign(keyList, { items: keyPage.items, after: keyPage.after })
  Object.assign(endpointList, { items: endpointPage.items, after: endpointPage.after })
  // The assign form offers the page's first keys until the user searches.
  Object.assign(assign, { results: keyPage.items.slice(0, CHOICES), more: keyPage.items.length > CHOICES || keyPage.after !== null })
  mergeAudit(auditNow)
  // The keys first, in a frame of their own; the rest in the next: one long layout becomes two short ones.
  renderKeys()
  $('#workspace').hidden = false
  await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)))
  renderEndpoints()
  renderChoices()
  renderAudit()
  watchRows($('#keys-table'), false)
  watchRows($('#endpoints-table'), false)
  // The links after the keys and endpoints they name, while the charts are read; shown without them if their route refuses.
  await Promise.all([drawLinks().catch(() => { liveLinks = []; renderLinks() }), usageSettled()])
}

/** The pages shown read again, with their rows' usage (a rotation's tables follow its clients). */
async function refreshTables () {
  if (hourStart(Date.now() + clockOffset) - (CHART_HOURS - 1) * HOUR_MS !== usage.first) resetUsage() // a new hour: the charts move on
  await showPage(keyList, 'keys', keyList.at, keyList.before, () => drawKeys(true))
  await showPage(endpointList, 'endpoints', endpointList.at, endpointList.before, () => drawEndpoints(true))
  await drawLinks().catch(() => {})
}

/** The latest audit entries, after a change made in the page. */
async function refreshAudit () {
  mergeAudit(await newestAudit().catch((err) => ({ error: err.message })))
  renderAudit()
}

async function openProject () {
  const form = $('#project-form')
  project.organization = form.elements.organization.value.trim()
  project.project = form.elements.project.value.trim()
  if (project.organization === '' || project.project === '') return
  $('#workspace').hidden = true
  clearTimeout(checkTimer)
  rotation = null
  resetAudit()
  document.title = `API keys: ${project.organization}/${project.project}`
  const [opened] = await Promise.all([attempt(`Could not open ${project.organization}/${project.project}`, load), loadResources()])
  if (opened) {
    const shown = keyList.after === null
      ? `${keyList.items.length} key(s)`
      : `the first ${keyList.items.length} keys are shown; search or turn the pages for the others`
    setStatus(`Project ${project.organization}/${project.project}: ${shown}.`)
    await resumeRotation()
  }
}

/** The project is remembered in the address: #<organization>/<project>. */
function projectFromHash () {
  const [organization, name] = location.hash.slice(1).split('/').map((part) => {
    try { return decodeURIComponent(part) } catch { return '' }
  })
  const form = $('#project-form')
  form.elements.organization.value = organization ?? ''
  form.elements.project.value = name ?? ''
  return Boolean(organization && name)
}

$('#project-form').addEventListener('submit', (event) => {
  event.preventDefault()
  const form = event.target
  const token = form.elements.token.value
  if (token === '') sessionStorage.removeItem(TOKEN_KEY)
  else sessionStorage.setItem(TOKEN_KEY, token)
  const hash = `#${encodeURIComponent(form.elements.organization.value.trim())}/${encodeURIComponent(form.elements.project.value.trim())}`
  if (location.hash !== hash) history.replaceState(null, '', hash)
  openProject()
})
window.addEventListener('hashchange', () => {
  if (projectFromHash()) openProject()
})

$('#project-form').elements.token.value = sessionStorage.getItem(TOKEN_KEY) ?? ''
if (projectFromHash()) openProject()
