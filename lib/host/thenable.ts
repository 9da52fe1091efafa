/** Whether a host's answer is a promise or another thenable (to be waited for), not the value itself. */
export function isThenable (value: unknown): value is PromiseLike<unknown> {
  return value instanceof Promise || (typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function')
}
