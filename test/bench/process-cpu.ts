import type { ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import type { Result } from 'autocannon'

/** Linux's clock tick (`getconf CLK_TCK`), the unit of /proc's CPU times. */
const MICROS_PER_TICK = 10_000

/**
 * A server process's CPU time so far, in µs: user and system time of all
 * its threads (utime + stime of /proc/<pid>/stat), read from outside, so
 * that measuring sends the server nothing. The benches asked a route of the
 * server for it before (/bench/cpu); in example-bench-server.ts that route
 * was on a Fastify instance beside the example's, and one request to it
 * deoptimised the example's hot path in that process: --trace-deopt counted 48 deopts in
 * the 5 s of load after one such request (10 in the 12 s before), most
 * "wrong map" (fastify's routeHandler, onSendEnd and preHandlerCallback,
 * find-my-way's find, node:http's parserOnIncoming, pino's child), and the
 * example's json cost about 10% more a request after it (2026-11-28).
 */
export function processCpu (child: ChildProcess): number {
  const fields = readFileSync(`/proc/${child.pid as number}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(fields[11]) + Number(fields[12])) * MICROS_PER_TICK
}

/** An autocannon run with the server's CPU time per request it answered (µs). */
export type CpuMeasured = Result & { cpuPerRequest: number }

/**
 * Runs a load (`run`, an autocannon run) and adds the server's CPU time per
 * request it answered, in µs (processCpu before and after): steadier than
 * throughput when the load generator shares the machine.
 */
export async function withCpuPerRequest<T extends Result> (child: ChildProcess, run: () => Promise<T>): Promise<T & CpuMeasured> {
  const before = processCpu(child)
  const result = await run()
  const cpu = processCpu(child) - before
  return Object.assign(result, { cpuPerRequest: cpu / Math.max(1, result.requests.total) })
}
