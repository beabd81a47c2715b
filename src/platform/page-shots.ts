// Screenshots of untrusted pages with playwright-core and a system Chromium. Every request
// Chromium makes (the page, its redirects and sub-resources, loopback included) goes through a
// private EgressProxy (egress-proxy.ts: the sandbox's egress rule, checked after resolution,
// connection pinned), and WebRTC may not bypass it. Used by the scheduler's screenshot
// sibling and by review sessions' snapshot of a live page.
import { constants } from 'node:fs'
import { access } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { createEgressProxy } from './egress-proxy.ts'

export const DEFAULT_CHROMIUM_PATH = '/usr/bin/chromium'
export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--force-webrtc-ip-handling-policy=disable_non_proxied_udp',
] as const

export interface PageShotOptions {
  width: number
  height: number
  /** Capture the whole scrollable page rather than the viewport. */
  fullPage: boolean
}

export interface PageShots {
  /** True when the Chromium binary is there and executable. */
  available(): Promise<boolean>
  /** PNG of `url`; rejects with the navigation's or the browser's error. */
  capture(url: string, options: PageShotOptions): Promise<Buffer>
}

export interface PageShotsOptions {
  chromiumPath: string
  /** `host:port` pairs the egress proxy lets through although private (same meaning as EgressPolicy.allow). */
  egressAllow: readonly string[]
  /** Resolver of the egress proxy; default the system's. */
  lookup?: (host: string) => Promise<Array<{ address: string; family: number }>>
  /** Browser launch, navigation and capture timeout each (default 30 s). */
  timeoutMs?: number
  /** Chromium processes at once (default 2), counted across every PageShots of the process. */
  maxConcurrent?: number
}

export async function chromiumAvailable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK)
    return true
  } catch {
    return false
  }
}

// Chromium processes at once, per process (they are heavy on a small machine).
let running = 0
const waiting: Array<() => void> = []
async function withSlot<T>(limit: number, fn: () => Promise<T>): Promise<T> {
  while (running >= limit) await new Promise<void>((resolve) => waiting.push(resolve))
  running++
  try {
    return await fn()
  } finally {
    running--
    waiting.shift()?.()
  }
}

async function render(options: PageShotsOptions, url: string, shot: PageShotOptions): Promise<Buffer> {
  const proxy = createEgressProxy({ allow: [...options.egressAllow], ...(options.lookup ? { lookup: options.lookup } : {}) })
  await proxy.listen(0)
  const port = (proxy.address() as AddressInfo).port
  const timeout = options.timeoutMs ?? 30_000
  try {
    // Loaded on the first screenshot: playwright-core is about 30 MB of heap a process that never
    // takes one should not carry.
    const { chromium } = await import('playwright-core')
    const browser = await chromium.launch({
      executablePath: options.chromiumPath,
      headless: true,
      args: [...CHROMIUM_FLAGS, `--proxy-server=http://127.0.0.1:${port}`, '--proxy-bypass-list=<-loopback>'],
      timeout,
    })
    try {
      const context = await browser.newContext({ viewport: { width: shot.width, height: shot.height }, serviceWorkers: 'block', acceptDownloads: false })
      const page = await context.newPage()
      // A redirect to a refused address renders the proxy's refusal text (or fails the navigation).
      await page.goto(url, { waitUntil: 'load', timeout })
      return await page.screenshot({ type: 'png', fullPage: shot.fullPage, timeout })
    } finally {
      await browser.close()
    }
  } finally {
    await proxy.close()
  }
}

export function createPageShots(options: PageShotsOptions): PageShots {
  return {
    available: () => chromiumAvailable(options.chromiumPath),
    capture: (url, shot) => withSlot(options.maxConcurrent ?? 2, () => render(options, url, shot)),
  }
}
