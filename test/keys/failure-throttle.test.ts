import t from 'tap'
import { clientKey, FailureThrottle } from '../../lib/keys/failure-throttle.js'

t.test('clientKey: IPv4 as is, IPv6 by /64, IPv4-mapped as IPv4', async (t) => {
  const cases: Array<[string, string]> = [
    ['192.0.2.7', '192.0.2.7'],
    ['127.0.0.1', '127.0.0.1'],
    ['::1', '::1'],
    ['::ffff:192.0.2.7', '192.0.2.7'],
    ['::FFFF:192.0.2.7', '192.0.2.7'],
    ['::ffff:c000:207', '192.0.2.7'],
    ['0:0:0:0:0:ffff:192.0.2.7', '192.0.2.7'],
    ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
    ['2001:DB8:1:2:FFFF:0:0:28', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002:0000:0000:0000:0001', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['2001:db8:0:0:1::', '2001:db8:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::192.0.2.7', '64:ff9b:0:0::/64'],
    ['::', '0:0:0:0::/64'],
    ['not:an:address', 'not:an:address']
  ]
  for (const [ip, key] of cases) t.equal(clientKey(ip), key, ip)
})

t.test('only clients with failures stay in the table', async (t) => {
  const throttle = new FailureThrottle({ maxFailures: 1, windowMs: 60_000, maxClients: 2 })
  throttle.recordFailure('a')
  for (const client of ['b', 'c', 'd']) {
    t.equal(throttle.admit(client), 0)
    throttle.settle(client)
  }
  t.ok(throttle.admit('a') > 0, 'clients that only succeeded did not evict a failing one')
})

t.test('attempts in flight count against the bound until settled', async (t) => {
  const throttle = new FailureThrottle({ maxFailures: 2, windowMs: 60_000 })
  t.equal(throttle.admit('a'), 0)
  t.equal(throttle.admit('a'), 0)
  t.equal(throttle.admit('a'), 1, 'two in flight: come back in a second')
  throttle.settle('a')
  t.equal(throttle.admit('a'), 0)
  throttle.recordFailure('a')
  throttle.settle('a')
  throttle.recordFailure('a')
  throttle.settle('a')
  t.equal(throttle.admit('a'), 60, 'two failures: wait for the window')
  throttle.settle('a')
  t.equal(throttle.admit('a'), 60, 'a settle too many does not go below zero')
})

t.test('clients in flight are bounded by maxClients', async (t) => {
  const throttle = new FailureThrottle({ maxFailures: 5, windowMs: 60_000, maxClients: 2 })
  t.equal(throttle.admit('a'), 0)
  t.equal(throttle.admit('b'), 0)
  t.equal(throttle.admit('c'), 1, 'a third client waits')
  t.equal(throttle.admit('a'), 0, 'one already in flight may add another')
  throttle.settle('b')
  t.equal(throttle.admit('c'), 0)
})
