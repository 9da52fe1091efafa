import { TypeBoxValidatorCompiler } from '@fastify/type-provider-typebox'
import type { FastifySchemaCompiler, FastifySchemaValidationError } from 'fastify'
import type { TSchema } from 'typebox'
import { isPlainInteger } from '../inputs.js'

/**
 * TypeBox's validator, except that an integer in a query string or path is
 * read only from plain digits. TypeBox converts text to numbers as
 * JavaScript does, so `2.5`, `true`, `0x10`, `1e1` and ` 1` would pass as
 * integers; here they are 400, as the data routes' `limit` is. (Bodies are
 * JSON and are not converted: an integer field there takes a JSON number.)
 */
export const strictValidatorCompiler: FastifySchemaCompiler<TSchema> = (route) => {
  const validate = TypeBoxValidatorCompiler(route)
  const properties = (route.schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {}
  const integers = route.httpPart === 'body' ? [] : Object.keys(properties).filter((name) => properties[name].type === 'integer')
  if (integers.length === 0) return validate
  return (value) => {
    for (const name of integers) {
      const text = (value as Record<string, unknown> | undefined)?.[name]
      if (text !== undefined && !isPlainInteger(text)) {
        const error: FastifySchemaValidationError = {
          keyword: 'type',
          instancePath: `/${name}`,
          schemaPath: `#/properties/${name}/type`,
          params: { type: 'integer' },
          message: 'must be an integer in plain digits, e.g. 50'
        }
        return { error: [error] }
      }
    }
    return validate(value)
  }
}
