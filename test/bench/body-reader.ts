// A benchmark's HTTP client in a process of its own (forked with IPC), so
// that the server process's event-loop delay is the server's alone: a
// client in the same process adds its own parsing and garbage to it.
// Told { url, headers, times, status, length }, it fetches the URL that many
// times one after another, reads each body as it comes (counting bytes, no
// copy), checks status and length, and answers { ms: number[] } or { error }.
interface Ask { url: string, headers: Record<string, string>, times: number, status: number, length: number }

process.on('message', (ask: Ask) => {
  read(ask).then((ms) => process.send?.({ ms }), (err: Error) => process.send?.({ error: err.message }))
})
process.on('disconnect', () => process.exit(0))

async function read ({ url, headers, times, status, length }: Ask): Promise<number[]> {
  const ms: number[] = []
  for (let i = 0; i < times; i++) {
    const t0 = process.hrtime.bigint()
    const res = await fetch(url, { headers })
    let got = 0
    for await (const chunk of res.body as AsyncIterable<Uint8Array>) got += chunk.byteLength
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6)
    if (res.status !== status || got !== length) throw new Error(`${url}: ${res.status}, ${got} bytes`)
  }
  return ms
}
