import { Type, type Static } from 'typebox'

// TypeBox schemas of the management API (DESIGN.md §4). The same schemas
// validate requests, serialise responses and feed the OpenAPI document.

export const ErrorBody = Type.Object({ message: Type.String() })

const Moniker = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._~-]{0,99}$', description: 'moniker' })
// Sequences in paths: positive integers written plainly (no sign, exponent or
// leading zero), the same rule as the data routes.
const Sequence = Type.String({ pattern: '^[1-9][0-9]{0,15}$', description: 'positive integer' })
const Purpose = Type.String({ minLength: 1, maxLength: 200 })

export const ProjectParams = Type.Object({
  organization: Moniker,
  project: Moniker
})

export const KeyParams = Type.Object({
  organization: Moniker,
  project: Moniker,
  keyId: Type.String({ minLength: 1, maxLength: 100 })
})

export const EndpointParams = Type.Object({
  organization: Moniker,
  project: Moniker,
  modelSequence: Sequence,
  type: Type.Union([Type.Literal('dataset'), Type.Literal('pipeline')]),
  resourceSequence: Sequence
})

export const CreateKeyBody = Type.Object({
  purpose: Purpose,
  isActive: Type.Optional(Type.Boolean())
}, { additionalProperties: false })

export const UpdateKeyBody = Type.Object({
  purpose: Type.Optional(Purpose),
  isActive: Type.Optional(Type.Boolean())
}, { additionalProperties: false })

export const PutEndpointBody = Type.Object({
  keyIds: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { maxItems: 1000 }))
}, { additionalProperties: false })

export const ApiKey = Type.Object({
  id: Type.String(),
  prefix: Type.String(),
  purpose: Type.String(),
  isActive: Type.Boolean(),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()])
})

export const ApiKeyWithValue = Type.Object({
  ...ApiKey.properties,
  key: Type.String({ description: 'the whole key; shown this once only' })
})

export const Endpoint = Type.Object({
  id: Type.String(),
  path: Type.String(),
  method: Type.Union([Type.Literal('GET'), Type.Literal('POST')]),
  type: Type.Union([Type.Literal('dataset'), Type.Literal('pipeline')]),
  organization: Type.String(),
  project: Type.String(),
  modelSequence: Type.Integer(),
  resourceSequence: Type.Integer(),
  calls: Type.Integer(),
  keys: Type.Array(Type.Object({
    id: Type.String(),
    prefix: Type.String(),
    purpose: Type.String(),
    isActive: Type.Boolean()
  })),
  createdAt: Type.String({ format: 'date-time' })
})

export type ApiKeyBody = Static<typeof ApiKey>
export type EndpointBody = Static<typeof Endpoint>
