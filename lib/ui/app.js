// The management page of fastify-data-endpoints: plain DOM and fetch, no
// framework, no build. It talks only to the management API beside it
// (<managementPrefix>/...), with the caller's own credentials: the session
// cookie the browser sends, or an optional bearer token kept in this tab.
// Strings from the API are only ever set as text, never parsed as HTML.

const API = new URL('../', location.href)
const TOKEN_KEY = 'data-endpoints-token'

const $ = (selector) => document.querySelector(selector)
const project = { organization: '', project: '' }
let keys = []

class ApiError extends Error {
  constructor (message, status) {
    super(message)
    this.status = status
  }
}

/** Calls the management API; resolves to the JSON answer, or rejects with the API's message. */
async function call (method, path, body) {
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
  if (res.status === 204) return null
  const data = await res.json().catch(() => null)
  if (!res.ok) {
    const message = typeof data?.message === 'string' ? data.message : `HTTP ${res.status} ${res.statusText}`
    throw new ApiError(message, res.status)
  }
  return data
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

/** Runs an action; its failure shows the API's message. */
async function attempt (action, work) {
  clearError()
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

const FIELD_CHECKS = new Map([['purpose', purposeProblem], ['modelSequence', sequenceProblem], ['resourceSequence', sequenceProblem]])

/** Sets a field's own validity message; call it too after setting its value from code. */
function checkField (input) {
  input.setCustomValidity(FIELD_CHECKS.get(input.name)(input))
}
document.addEventListener('input', (event) => {
  if (FIELD_CHECKS.has(event.target.name)) checkField(event.target)
})

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
$('#purpose-cancel').addEventListener('click', () => $('#purpose-dialog').close())
$('#purpose-form').addEventListener('submit', async (event) => {
  event.preventDefault()
  const purpose = event.target.elements.purpose.value
  $('#purpose-dialog').close()
  const key = editedKey
  await attempt('Could not edit the purpose', async () => {
    await call('PATCH', `keys/${encodeURIComponent(key.id)}`, { purpose })
    await load()
    setStatus(`Purpose of key ${key.prefix} saved.`)
  })
})

// --- keys ------------------------------------------------------------------

function lastUsed (updatedAt) {
  if (updatedAt === null) return 'never'
  return el('time', { dateTime: updatedAt, textContent: new Date(updatedAt).toLocaleString() })
}

function rowButton (text, label, focusId, onClick, className = '') {
  return el('button', {
    type: 'button', textContent: text, className, attrs: { 'aria-label': label, 'data-focus': focusId }, onclick: onClick
  })
}

function renderKeys () {
  const rows = keys.map((key) => el('tr', {},
    el('td', {}, el('code', { textContent: key.prefix })),
    el('td', { textContent: key.purpose }),
    el('td', { textContent: key.isActive ? 'Active' : 'Disabled', className: key.isActive ? 'active' : 'disabled' }),
    el('td', {}, lastUsed(key.updatedAt)),
    el('td', { className: 'actions' },
      rowButton('Edit purpose', `Edit purpose of key ${key.prefix}`, `${key.id}:purpose`, () => editPurpose(key)),
      rowButton(key.isActive ? 'Disable' : 'Enable', `${key.isActive ? 'Disable' : 'Enable'} key ${key.prefix}`,
        `${key.id}:toggle`, () => toggleKey(key)),
      rowButton('Regenerate', `Regenerate key ${key.prefix}`, `${key.id}:regenerate`, () => regenerateKey(key)),
      rowButton('Delete', `Delete key ${key.prefix}`, `${key.id}:delete`, () => deleteKey(key), 'danger'))))
  replaceRows($('#keys-table'), rows, $('#keys-title'))
  $('#no-keys').hidden = keys.length > 0

  // The assign form offers the same keys; checked boxes stay checked.
  const box = $('#assign-keys')
  const checked = new Set([...box.querySelectorAll('input:checked')].map((c) => c.value))
  const choices = keys.map((key) => el('label', { className: 'choice' },
    el('input', { type: 'checkbox', name: 'keyIds', value: key.id, checked: checked.has(key.id) }),
    ` ${key.prefix} — ${key.purpose}${key.isActive ? '' : ' (disabled)'}`))
  box.replaceChildren(box.querySelector('legend'), ...(choices.length > 0 ? choices : [el('p', { className: 'empty', textContent: 'No keys yet.' })]))
}

function editPurpose (key) {
  editedKey = key
  $('#purpose-form').elements.purpose.value = key.purpose
  checkField($('#purpose-form').elements.purpose)
  $('#purpose-dialog').showModal()
}

async function toggleKey (key) {
  await attempt(`Could not ${key.isActive ? 'disable' : 'enable'} the key`, async () => {
    await call('PATCH', `keys/${encodeURIComponent(key.id)}`, { isActive: !key.isActive })
    await load()
    setStatus(`Key ${key.prefix} ${key.isActive ? 'disabled' : 'enabled'}.`)
  })
}

async function regenerateKey (key) {
  const ok = await confirmAction(`Regenerate key ${key.prefix} (${key.purpose})? Its current value stops working at once; ` +
    'its endpoints keep the key.', 'Regenerate')
  if (!ok) return
  await attempt('Could not regenerate the key', async () => {
    const renewed = await call('POST', `keys/${encodeURIComponent(key.id)}/regenerate`)
    await load()
    setStatus(`Key ${renewed.prefix} regenerated; its old value no longer works.`)
    showKeyValue(`New value of key ${renewed.prefix}`, renewed.key)
  })
}

async function deleteKey (key) {
  const ok = await confirmAction(`Delete key ${key.prefix} (${key.purpose})? It stops working at once. ` +
    'Its endpoints stay, without this key.', 'Delete key')
  if (!ok) return
  await attempt('Could not delete the key', async () => {
    await call('DELETE', `keys/${encodeURIComponent(key.id)}`)
    await load()
    setStatus(`Key ${key.prefix} deleted.`)
  })
}

$('#create-key-form').addEventListener('submit', async (event) => {
  event.preventDefault()
  const form = event.target
  await attempt('Could not create the key', async () => {
    const created = await call('POST', 'keys', { purpose: form.elements.purpose.value })
    form.reset()
    await load()
    setStatus(`Key ${created.prefix} created.`)
    showKeyValue(`New API key ${created.prefix}`, created.key)
  })
})

// --- endpoints -------------------------------------------------------------

function endpointKeys (endpoint) {
  if (endpoint.keys.length === 0) return el('span', { className: 'empty', textContent: 'none' })
  return el('ul', { className: 'plain' }, ...endpoint.keys.map((k) => el('li', {},
    el('code', { textContent: k.prefix }), ` ${k.purpose}${k.isActive ? '' : ' (disabled)'}`)))
}

function renderEndpoints (endpoints) {
  const rows = endpoints.map((e) => el('tr', {},
    el('td', {}, el('code', { textContent: e.path })),
    el('td', { textContent: e.method }),
    el('td', {}, endpointKeys(e)),
    el('td', { textContent: String(e.calls), className: 'number' }),
    el('td', { className: 'actions' },
      rowButton('Edit keys', `Edit keys of ${e.path}`, `${e.id}:edit`, () => editEndpoint(e)),
      rowButton('Delete', `Delete endpoint ${e.path}`, `${e.id}:delete`, () => deleteEndpoint(e), 'danger'))))
  replaceRows($('#endpoints-table'), rows, $('#endpoints-title'))
  $('#no-endpoints').hidden = endpoints.length > 0
}

function endpointPath (e) {
  return `endpoints/${e.modelSequence}/${e.type}/${e.resourceSequence}`
}

function editEndpoint (endpoint) {
  const form = $('#assign-form')
  form.elements.modelSequence.value = endpoint.modelSequence
  form.elements.type.value = endpoint.type
  form.elements.resourceSequence.value = endpoint.resourceSequence
  checkField(form.elements.modelSequence)
  checkField(form.elements.resourceSequence)
  const assigned = new Set(endpoint.keys.map((k) => k.id))
  for (const box of form.querySelectorAll('input[name=keyIds]')) box.checked = assigned.has(box.value)
  form.elements.modelSequence.focus()
  setStatus(`Editing the keys of ${endpoint.path}: change the ticks, then Assign keys.`)
}

async function deleteEndpoint (endpoint) {
  const ok = await confirmAction(`Delete the endpoint ${endpoint.method} ${endpoint.path}? Its API access ends at once; ` +
    `the ${endpoint.type} itself stays.`, 'Delete endpoint')
  if (!ok) return
  await attempt('Could not delete the endpoint', async () => {
    await call('DELETE', endpointPath(endpoint))
    await load()
    setStatus(`Endpoint ${endpoint.path} deleted.`)
  })
}

$('#assign-form').addEventListener('submit', async (event) => {
  event.preventDefault()
  const form = event.target
  // Plain digits, as the API wants them: 01 and 1e3 go as 1 and 1000.
  const target = {
    modelSequence: String(form.elements.modelSequence.valueAsNumber),
    type: form.elements.type.value,
    resourceSequence: String(form.elements.resourceSequence.valueAsNumber)
  }
  const keyIds = [...form.querySelectorAll('input[name=keyIds]:checked')].map((box) => box.value)
  await attempt('Could not assign the keys', async () => {
    const endpoint = await call('PUT', endpointPath(target), { keyIds })
    await load()
    setStatus(`Endpoint ${endpoint.method} ${endpoint.path} now has ${endpoint.keys.length} key(s).`)
  })
})

// --- project ---------------------------------------------------------------

async function load () {
  const [keyList, endpoints] = await Promise.all([call('GET', 'keys'), call('GET', 'endpoints')])
  keys = keyList
  renderKeys()
  renderEndpoints(endpoints)
  $('#workspace').hidden = false
}

async function openProject () {
  const form = $('#project-form')
  project.organization = form.elements.organization.value.trim()
  project.project = form.elements.project.value.trim()
  if (project.organization === '' || project.project === '') return
  $('#workspace').hidden = true
  document.title = `API keys: ${project.organization}/${project.project}`
  if (await attempt(`Could not open ${project.organization}/${project.project}`, load)) {
    setStatus(`Project ${project.organization}/${project.project}: ${keys.length} key(s).`)
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
