/**
 * Stops a download's source when the client goes away. The AbortSignal
 * handed to the host's `rows()` is made only when something reads it:
 * creating an AbortController (an EventTarget) costs more than writing a
 * small dataset's rows, and many sources never look at it.
 */
export class DownloadAbort {
  private done = false
  private controller: AbortController | null = null
  private listener: (() => void) | null = null

  get aborted (): boolean {
    return this.done
  }

  get signal (): AbortSignal {
    if (this.controller === null) {
      this.controller = new AbortController()
      if (this.done) this.controller.abort()
    }
    return this.controller.signal
  }

  abort (): void {
    if (this.done) return
    this.done = true
    this.controller?.abort()
    this.listener?.()
  }

  /** Calls `stop` on abort (one listener at a time); returns what removes it. */
  onAbort (stop: () => void): () => void {
    this.listener = stop
    return () => { if (this.listener === stop) this.listener = null }
  }
}
