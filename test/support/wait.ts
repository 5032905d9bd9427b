// Polling helpers for tests against real clusters: poll until a probe returns something truthy, and
// say what was awaited (and the last error the probe threw) when it times out.
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

export const waitUntil = async <T>(
  what: string,
  timeoutMs: number,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  intervalMs = 200,
): Promise<T> => {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  while (Date.now() < deadline) {
    try {
      const v = await probe()
      if (v) return v
    } catch (e) {
      last = e
    }
    await sleep(intervalMs)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (${String(last)})` : ""}`)
}
