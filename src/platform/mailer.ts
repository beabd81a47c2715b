// Outgoing e-mail through nodemailer. With SMTP_URL it speaks SMTP; without it messages are
// rendered by nodemailer's JSON transport and kept in a bounded in-process outbox. The dev-only
// route GET /dev/outbox shows it on the local dev chain only (the embedded default); with a real
// chain and no SMTP_URL nothing shows it, so mail is not delivered: warnMailUndelivered says so
// once at start.
import type { Transporter } from 'nodemailer'

export interface MailMessage {
  to: string
  subject: string
  text: string
}

export interface SentMail extends MailMessage {
  id: string
  from: string
  at: string
}

export interface Mailer {
  readonly kind: 'smtp' | 'outbox'
  send(message: MailMessage): Promise<{ id: string }>
  /** Messages kept by the outbox transport, newest last (empty for SMTP). */
  outbox(): readonly SentMail[]
  close(): void
}

const OUTBOX_LIMIT = 200

export function createMailer(options: { smtpUrl?: string | undefined; from: string }): Mailer {
  // nodemailer is loaded with the first message: most processes never send one.
  let transport: Promise<Transporter> | undefined
  const open = () =>
    (transport ??= import('nodemailer').then(({ default: nodemailer }) =>
      options.smtpUrl ? nodemailer.createTransport(options.smtpUrl) : (nodemailer.createTransport({ jsonTransport: true }) as Transporter),
    ))
  const close = () => void transport?.then((opened) => opened.close()).catch(() => {})
  if (options.smtpUrl) {
    return {
      kind: 'smtp',
      async send(message) {
        const info = await (await open()).sendMail({ from: options.from, ...message })
        return { id: String(info.messageId) }
      },
      outbox: () => [],
      close,
    }
  }
  const kept: SentMail[] = []
  return {
    kind: 'outbox',
    async send(message) {
      const info = await (await open()).sendMail({ from: options.from, ...message })
      const id = String(info.messageId)
      kept.push({ id, from: options.from, at: new Date().toISOString(), ...message })
      if (kept.length > OUTBOX_LIMIT) kept.shift()
      return { id }
    },
    outbox: () => kept,
    close,
  }
}

const warned = new WeakSet<Mailer>()

/**
 * Mail kept in the outbox where no dev route shows it (a real chain and no SMTP_URL) reaches nobody:
 * said once per mailer, at warn, when the process starts. Never the messages themselves: they carry
 * claim codes and signed log links.
 */
export function warnMailUndelivered(mailer: Mailer, logger: { warn(details: object, message: string): void }): void {
  if (mailer.kind !== 'outbox' || warned.has(mailer)) return
  warned.add(mailer)
  logger.warn(
    { mail: 'not delivered' },
    'SMTP_URL is not set and GET /dev/outbox is served on the local dev chain only: e-mail (agent claim codes, run notifications) is not delivered; set SMTP_URL',
  )
}
