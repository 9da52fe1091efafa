import type { FastifyInstance } from 'fastify'
import { InvalidParameterError } from '../errors.js'
import { numberNotInPlainDigits } from '../inputs.js'

/**
 * JSON bodies in `scope` parsed as Fastify parses them (the host's
 * prototype-poisoning settings), after a check that every number is an
 * integer in plain digits: our bodies hold no other number, and JSON.parse
 * would read `1e2` as 100 and `2.0` as 2, past a schema that says integer.
 * Such a body is 400, naming the key.
 */
export function plainJsonBodies (scope: FastifyInstance): void {
  const { onProtoPoisoning, onConstructorPoisoning } = scope.initialConfig
  const parse = scope.getDefaultJsonParser(onProtoPoisoning ?? 'error', onConstructorPoisoning ?? 'error')
  scope.removeContentTypeParser('application/json')
  scope.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const found = numberNotInPlainDigits(body as string)
    if (found !== null) {
      done(new InvalidParameterError(`Invalid ${found.key ?? 'body'}: must be an integer in plain digits, e.g. 50 (not ${found.number.slice(0, 40)})`), undefined)
      return
    }
    parse(request, body as string, done)
  })
}
