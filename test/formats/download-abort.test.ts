import t from 'tap'
import { DownloadAbort } from '../../lib/formats/download-abort.js'

t.test('a signal read before the abort is aborted with it', async (t) => {
  const abort = new DownloadAbort()
  const signal = abort.signal
  t.equal(abort.signal, signal, 'one signal per download')
  let heard = 0
  signal.addEventListener('abort', () => { heard++ })
  t.notOk(signal.aborted)
  abort.abort()
  abort.abort()
  t.ok(signal.aborted)
  t.ok(abort.aborted)
  t.equal(heard, 1, 'the source hears it once')
})

t.test('a signal first read after the abort is already aborted', async (t) => {
  const abort = new DownloadAbort()
  abort.abort()
  t.ok(abort.signal.aborted, 'a source that looks late still stops')
})

t.test('onAbort calls its listener once, and not after removal', async (t) => {
  const abort = new DownloadAbort()
  let stops = 0
  const remove = abort.onAbort(() => { stops++ })
  remove()
  const other = new DownloadAbort()
  other.onAbort(() => { stops += 10 })
  abort.abort()
  t.equal(stops, 0, 'a removed listener is not called')
  other.abort()
  other.abort()
  t.equal(stops, 10, 'a listener in place is called once')
})
