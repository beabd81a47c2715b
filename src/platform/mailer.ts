// Outgoing e-mail through nodemailer. With SMTP_URL it speaks SMTP; without it (the embedded
// default) messages are rendered by nodemailer's JSON transport and kept in a bounded in-process
// outbox that the dev-only route GET /dev/outbox shows.
import nodemailer from 'nodemailer'

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
  if (options.smtpUrl) {
    const transport = nodemailer.createTransport(options.smtpUrl)
    return {
      kind: 'smtp',
      async send(message) {
        const info = await transport.sendMail({ from: options.from, ...message })
        return { id: String(info.messageId) }
      },
      outbox: () => [],
      close: () => transport.close(),
    }
  }
  const transport = nodemailer.createTransport({ jsonTransport: true })
  const kept: SentMail[] = []
  return {
    kind: 'outbox',
    async send(message) {
      const info = await transport.sendMail({ from: options.from, ...message })
      const id = String(info.messageId)
      kept.push({ id, from: options.from, at: new Date().toISOString(), ...message })
      if (kept.length > OUTBOX_LIMIT) kept.shift()
      return { id }
    },
    outbox: () => kept,
    close: () => transport.close(),
  }
}
