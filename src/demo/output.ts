// What the demo prints: one progress line per step (✓ done, – skipped, ✗ failed), indented
// detail lines under it, a failure block saying what was asked and what came back, and the
// closing summary with the links. Money is integer micros (bigint), printed as USDC.

export interface DemoIo {
  out: NodeJS.WritableStream
  err: NodeJS.WritableStream
}

const INDENT = '       '

/** 1234567n → "1.234567"; negative amounts keep their sign. */
export function usdc(micros: bigint): string {
  const sign = micros < 0n ? '-' : ''
  const abs = micros < 0n ? -micros : micros
  return `${sign}${abs / 1_000_000n}.${(abs % 1_000_000n).toString().padStart(6, '0')}`
}

/** "+0.050000" / "-0.001100": a ledger amount. */
export function signedUsdc(micros: bigint): string {
  return micros < 0n ? usdc(micros) : `+${usdc(micros)}`
}

/** A string cut to `max` characters on one line. */
export function clip(text: string, max = 600): string {
  const flat = text.replace(/\s+/g, ' ').trim()
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`
}

export class Printer {
  readonly io: DemoIo
  readonly total: number

  constructor(io: DemoIo, total: number) {
    this.io = io
    this.total = total
  }

  line(text = ''): void {
    this.io.out.write(`${text}\n`)
  }

  private tag(step: number): string {
    return `${step}/${this.total}`
  }

  passed(step: number, summary: string, details: string[] = []): void {
    this.line(`✓ ${this.tag(step)} ${summary}`)
    for (const detail of details) this.line(`${INDENT}${detail}`)
  }

  skipped(step: number, title: string, reason: string): void {
    this.line(`– ${this.tag(step)} ${title}: skipped (${reason})`)
  }

  /** The failure block, on stderr (and its headline on stdout, so the progress reads in order). */
  failed(step: number, title: string, failure: { message: string; asked?: string; got?: string; hint?: string }): void {
    this.line(`✗ ${this.tag(step)} ${title}: failed`)
    const lines = [`demo failed at step ${step}/${this.total} (${title}): ${failure.message}`]
    if (failure.asked) lines.push(`  asked: ${failure.asked}`)
    if (failure.got) lines.push(`  got:   ${failure.got}`)
    if (failure.hint) lines.push(`  hint:  ${failure.hint}`)
    this.io.err.write(`${lines.join('\n')}\n`)
  }

  /** Something done on the way out after a failure (the task deleted, its escrow refunded). */
  cleanup(text: string): void {
    this.line(`${INDENT}cleanup: ${text}`)
  }
}

export interface Summary {
  links: Array<[label: string, url: string]>
  skipped: Array<{ title: string; reason: string }>
  walletLines: string[]
  refundTx: string | undefined
  refundNote: string
}

export function printSummary(printer: Printer, summary: Summary): void {
  printer.line()
  if (summary.links.length > 0) {
    printer.line('Links')
    const width = Math.max(...summary.links.map(([label]) => label.length))
    for (const [label, url] of summary.links) printer.line(`  ${label.padEnd(width)}  ${url}`)
    printer.line()
  }
  for (const line of summary.walletLines) printer.line(line)
  printer.line(summary.refundTx ? `refund tx ${summary.refundTx}` : `refund tx: none (${summary.refundNote})`)
  if (summary.skipped.length === 0) printer.line('all steps passed')
  else printer.line(`all steps passed (${summary.skipped.length} skipped: ${summary.skipped.map((skip) => skip.title).join(', ')})`)
}
