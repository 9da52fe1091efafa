// Finds secrets in log lines and response bodies in every form they could
// take there: as they are, percent-encoded (any characters, once or twice),
// or as the bytes of a serialised Buffer ({"type":"Buffer","data":[...]}),
// which is how pino writes the raw packet of a request Node could not parse.

const KEY = /^[A-Za-z0-9]{10}-[A-Za-z0-9]{21}$/

function percentDecode (text: string): string {
  return text.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)))
}

function bufferTexts (text: string): string[] {
  return [...text.matchAll(/"data":\[([0-9,]*)\]/g)].map(([, bytes]) =>
    Buffer.from(bytes.split(',').filter(Boolean).map(Number)).toString('latin1'))
}

/** Every reading of `text` a secret could hide in. */
export function readings (text: string): string[] {
  const once = percentDecode(text)
  return [text, once, percentDecode(once), ...bufferTexts(text)]
}

/**
 * What must never show: for an API key its secret part (the 10-character
 * prefix may be logged), for any other secret the whole value.
 */
export function secretPart (secret: string): string {
  return KEY.test(secret) ? secret.slice(11) : secret
}

/** The texts that carry one of `secrets` in any reading, with the secret masked for the report. */
export function leaks (texts: Iterable<string>, secrets: string[]): string[] {
  const parts = secrets.map(secretPart)
  const found: string[] = []
  for (const text of texts) {
    if (readings(text).some((r) => parts.some((p) => r.includes(p)))) {
      let shown = text
      for (const p of parts) shown = shown.replaceAll(p, '<SECRET>')
      found.push(shown.length > 600 ? shown.slice(0, 600) + '...' : shown)
    }
  }
  return found
}
