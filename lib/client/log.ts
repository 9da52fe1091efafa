// One log entry per request attempt (SPEC.md §7.4): the URL, the status, the
// message, a timestamp and the key prefix. The client never puts the key in a
// URL and logged URLs have `api_key` redacted anyway, so no entry holds a key.

export interface ClientLogEntry {
  /** ISO 8601 */
  time: string
  method: string
  /** the request URL, `api_key` redacted */
  url: string
  /** the HTTP status, or null when no answer came (time-out, connection error) */
  status: number | null
  /** the server's message on an error, the error's text when no answer came, else the status text */
  message: string
  /** the first 10 characters of the key sent; absent on calls without a key (job status) */
  keyPrefix?: string
  /** 1 for the first try, 2 for the first retry, ... */
  attempt: number
  /** set when the attempt failed and another follows after this many milliseconds */
  retryInMs?: number
}

export type ClientLogger = (entry: ClientLogEntry) => void

/** The default in library use: the host decides where logs go. */
export const silentLogger: ClientLogger = () => {}

/** Writes each entry as one JSON line, to stderr by default. */
export function jsonLinesLogger (stream: NodeJS.WritableStream = process.stderr): ClientLogger {
  return (entry) => {
    stream.write(JSON.stringify(entry) + '\n')
  }
}
