import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { MANAGE_API_KEYS } from '../lib/index.js'

const BEARER = /^bearer[ \t]+(\S+)[ \t]*$/i

function digest (text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest()
}

/**
 * The example's `getPermissions`: `Authorization: Bearer <adminToken>` grants
 * ManageAPIKeys, anything else grants nothing. Both sides are hashed first, so
 * the constant-time compare always sees equal lengths and leaks none.
 */
export function adminTokenPermissions (adminToken: string): (request: FastifyRequest) => string[] {
  const expected = digest(adminToken)
  return (request) => {
    const match = BEARER.exec(request.headers.authorization ?? '')
    if (match === null) return []
    return timingSafeEqual(digest(match[1]), expected) ? [MANAGE_API_KEYS] : []
  }
}
