import { redactKeys } from '../keys/api-key.js'
import { redactUrl } from '../routes/log-redaction.js'
import { UsageError } from './errors.js'

// Checks a URL before the client sends anything to it. The key travels only in
// the Authorization header: a URL that carries `api_key` is refused, since the
// key would end up in access logs, proxies and shell history.

export interface UrlRules {
  baseUrl: URL | undefined
  /** the request carries the key */
  sendsKey: boolean
  /** allow the key over plain HTTP to a host that is not loopback */
  allowHttp: boolean
}

function isLoopback (hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname)
}

export function checkedUrl (input: string | URL, rules: UrlRules): URL {
  let url: URL
  try {
    url = new URL(input, rules.baseUrl)
  } catch {
    throw new UsageError(`Invalid URL: ${redactUrl(String(input))}`)
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new UsageError(redactKeys(`Unsupported URL scheme ${url.protocol} (use https)`))
  }
  if ([...url.searchParams.keys()].some((name) => name.toLowerCase() === 'api_key')) {
    throw new UsageError('The API key must not be in the URL (api_key=): it is sent in the Authorization header. ' +
      'Remove it from the URL; give it as the apiKey option, or in DATA_ENDPOINTS_API_KEY for the CLI')
  }
  if (url.username !== '' || url.password !== '') {
    throw new UsageError('Credentials in the URL are not supported: the API key is sent in the Authorization header')
  }
  if (rules.sendsKey && url.protocol === 'http:' && !isLoopback(url.hostname) && !rules.allowHttp) {
    // The host is shown masked: a key pasted into it would be echoed (lower-cased) otherwise.
    throw new UsageError(`Refusing to send the API key over plain HTTP to ${redactKeys(url.host)}: use https ` +
      '(or allowHttp / --allow-http on a trusted network)')
  }
  return url
}
