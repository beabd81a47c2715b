// The review UI in Chromium without the rest of the product: a node:http "gateway" on 127.0.0.1
// serving the reviewer page (with the route's CSP and Referrer-Policy) and its assets, and a second
// server standing in for the isolated origin (http://s-test.localhost:<port>; Chromium resolves
// *.localhost to loopback) serving a small site with the overlay's head tags injected and
// /__agent_gateway__/* from createSiteAssets. A reviewer pins by mouse and keyboard, edits, deletes,
// reloads (the draft survives) and submits once; the body the page sends must be a valid
// ReviewSubmission whose selectors find the pinned elements. The site's scripts must not reach the
// capability nor the parent, and their spoofed messages must change nothing.
import { randomBytes, randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { Ajv } from 'ajv'
import addFormatsModule from 'ajv-formats'
import type { Browser, Page } from 'playwright-core'
import { ReviewSubmission } from '../../src/catalog/schemas/reviews.ts'
import { createReviewerAssets, createSiteAssets } from '../../src/reviews/ui/assets.ts'
import type { ReviewerPageView, ReviewJson, SubmissionJson } from '../../src/reviews/types.ts'
import { SITE_RESERVED_PREFIX } from '../../src/reviews/types.ts'
import {
  commentBox,
  deletePin,
  editComment,
  launchChromium,
  pinCount,
  pinElement,
  pinWithKeyboard,
  setOverallComment,
  severitySelect,
  siteFrame,
  siteFrameHandle,
  submitReview,
  waitForSite,
} from '../helpers/reviewer-driver.ts'

// Browser globals of the functions evaluated in the page and the frame (the tsconfig has no DOM lib).
declare const document: any
declare const window: any
declare const XPathResult: any

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv
const checkSubmission = addFormats(new Ajv({ allErrors: true })).compile(JSON.parse(JSON.stringify(ReviewSubmission)) as object)

interface Review {
  reviewId: string
  capability: string
  /** A live page (proxied at the site origin, with a screenshot fallback) instead of a bundle. */
  liveUrl?: string
  /** Answers the next submission with this problem instead of taking it. */
  refuseNext?: { status: number; problem: Record<string, unknown> }
  status: 'open' | 'submitted'
  review: ReviewJson | null
  submissions: unknown[]
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as AddressInfo).port
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of request) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks).toString('utf8')
}

function send(response: ServerResponse, status: number, headers: Record<string, string>, body: string | Buffer): void {
  response.writeHead(status, { 'x-content-type-options': 'nosniff', 'cache-control': 'no-store', ...headers })
  response.end(body)
}

const SITE_SCRIPT = `
window.__siteClicks = 0
document.addEventListener('DOMContentLoaded', () => {
  document.querySelector('[data-testid="save-button"]').addEventListener('click', () => { window.__siteClicks++ })
})
console.error('site failed to load widget', { code: 42 })
console.warn('deprecated api used')
const probe = {}
try { probe.parentHref = parent.location.href } catch (e) { probe.parentHref = 'blocked:' + e.name + ': ' + e.message }
try { probe.parentDocument = String(parent.document) } catch (e) { probe.parentDocument = 'blocked:' + e.name }
try { probe.parentStorage = String(parent.localStorage) } catch (e) { probe.parentStorage = 'blocked:' + e.name }
probe.referrer = document.referrer
probe.name = window.name
probe.href = location.href
window.__probe = probe
// Spoofed overlay messages: wrong shapes, and a well-formed pick nobody asked for.
const P = 'agent-gateway-review/1'
parent.postMessage('junk', '*')
parent.postMessage({ protocol: P, type: 'picked', pin: 'bogus' }, '*')
parent.postMessage({ protocol: P, type: 'picked', pin: { selector: 'body', tag: 'body', text: '', box: { x: 0, y: 0, width: 1, height: 1 }, viewport: { width: 1, height: 1 }, scroll: { x: 0, y: 0 }, page: { url: '/index.html', title: '' } } }, '*')
parent.postMessage({ protocol: P, type: 'console', entries: [{ level: 'fatal', message: 42 }, 'x'] }, '*')
parent.postMessage({ protocol: P, type: 'console', entries: 'not a list' }, '*')
parent.postMessage({ protocol: P, type: 'ready', page: { url: '//evil.example/', title: 7 } }, '*')
// Frame busting: the sandbox has no allow-top-navigation.
try { top.location.href = 'http://example.invalid/busted' } catch (e) { probe.topNavigation = 'blocked:' + e.name + ': ' + e.message }
setTimeout(() => { throw new Error('boom from site') }, 0)
`

function siteHtml(headTags: string): string {
  return `<!doctype html><html lang="en"><head>${headTags}<meta charset="utf-8"><title>Test site</title>
<style>.css-1x2y9 { color: #333 } button { padding: 8px 16px } body { font: 16px sans-serif }</style>
<script src="/app.js"></script>
</head><body>
<h1 class="css-1x2y9 headline">Welcome to the test site</h1>
<p id="intro">An introduction paragraph that is a bit too long.</p>
<button type="button" data-testid="save-button" class="sc-bdVaJa">Save changes</button>
<ul class="items"><li>One</li><li>Two</li><li class="jsx-123">Three</li></ul>
</body></html>`
}

t.test('assets: placeholders filled, config inert, strong ETags', async (t) => {
  const site = createSiteAssets('https://gw.example:8443')
  t.equal(
    site.headTags,
    '<script src="/__agent_gateway__/capture.js"></script><link rel="modulepreload" href="/__agent_gateway__/finder.js"><script type="module" src="/__agent_gateway__/overlay.js"></script>',
  )
  const overlay = site.get('overlay.js')!.body.toString('utf8')
  t.ok(overlay.includes(`const REVIEWER_ORIGIN = "https://gw.example:8443"`), 'the reviewer origin is written into overlay.js')
  t.notOk(overlay.includes('__REVIEWER_ORIGIN__'))
  const capture = site.get('capture.js')!.body.toString('utf8')
  t.match(capture, /const MAX_ENTRIES = 200\b/)
  t.notOk(/\/\*LIMIT:[A-Z_]+\*\/ ?\d/.test(capture), 'every limit is filled in')
  t.match(site.get('finder.js')!.body.toString('utf8'), /export function finder\(/)
  for (const name of ['capture.js', 'overlay.js', 'finder.js']) {
    const file = site.get(name)!
    t.equal(file.contentType, 'text/javascript; charset=utf-8')
    t.match(file.etag, /^"[A-Za-z0-9_-]{43}"$/)
  }
  t.equal(site.get('../limits.ts'), undefined)
  t.throws(() => createSiteAssets('https://gw.example/path'), /not an origin/)

  const page = createReviewerAssets()
  t.equal(page.get('reviewer.css')!.contentType, 'text/css; charset=utf-8')
  t.equal(page.get('reviewer.js')!.contentType, 'text/javascript; charset=utf-8')
  t.equal(page.get('reviewer.html'), undefined)
  const hostile = '</script><script>alert(1)</script>&amp;\u2028\u2029{{TITLE}}"{{CONFIG}}"$&$1'
  const view: ReviewerPageView = {
    reviewId: randomUUID(),
    status: 'open',
    source: { kind: 'zip', entryFile: hostile, bundleUrl: '/b.zip' },
    frameUrl: 'http://s-x.localhost:1/index.html',
    siteOrigin: 'http://s-x.localhost:1',
    snapshotUrl: null,
    submitUrl: '/reviews/x/submission',
    review: null,
  }
  const html = page.render(view)
  const config = /<script type="application\/json" id="review-config">([^<]*)<\/script>/.exec(html)
  t.ok(config, 'the config element is intact')
  t.notOk(/[<>&\u2028\u2029]/.test(config![1]!), 'no <, >, &, U+2028/9 in the JSON')
  t.same(JSON.parse(config![1]!).source.entryFile, hostile, 'the JSON round-trips')
  t.equal(html.match(/<script/g)!.length, 2, 'no script element was injected')
  t.match(html, /<title>Review of &lt;\/script&gt;&lt;script&gt;alert\(1\)/, 'the title is escaped')
})

t.test('reviewer page and overlay in Chromium', async (t) => {
  const reviews = new Map<string, Review>()
  const siteRequests: { url: string; referer: string | undefined }[] = []
  const reviewerAssets = createReviewerAssets()

  // The site server needs the reviewer origin (for the overlay and frame-ancestors), the reviewer
  // server the site's port (for frame-src): listen first, route after.
  let reviewerOrigin = ''
  let siteOrigin = ''
  let sitePort = 0
  let siteAssets: ReturnType<typeof createSiteAssets> | undefined

  const reviewer = createServer(async (request, response) => {
    const url = new URL(request.url ?? '/', reviewerOrigin)
    const asset = /^\/reviews\/assets\/([a-z.-]+)$/.exec(url.pathname)
    if (asset && request.method === 'GET') {
      const file = reviewerAssets.get(asset[1]!)
      if (!file) return send(response, 404, { 'content-type': 'text/plain' }, 'not found')
      return send(response, 200, { 'content-type': file.contentType, etag: file.etag }, file.body)
    }
    const match = /^\/reviews\/([A-Za-z0-9_-]{20,200})(\/submission)?$/.exec(url.pathname)
    const review = match ? reviews.get(match[1]!) : undefined
    if (!match || !review) return send(response, 404, { 'content-type': 'application/problem+json' }, JSON.stringify({ status: 404, title: 'Not found', detail: 'no such review' }))
    if (match[2] && request.method === 'POST') {
      const body = JSON.parse(await readBody(request)) as SubmissionJson
      review.submissions.push(body)
      if (review.refuseNext) {
        const { status, problem } = review.refuseNext
        review.refuseNext = undefined
        return send(response, status, { 'content-type': 'application/problem+json' }, JSON.stringify({ status, ...problem }))
      }
      if (review.status === 'submitted') {
        return send(
          response,
          409,
          { 'content-type': 'application/problem+json' },
          JSON.stringify({ status: 409, title: 'Review already submitted', detail: 'This review was already submitted' }),
        )
      }
      review.status = 'submitted'
      review.review = {
        reviewId: review.reviewId,
        source: review.liveUrl
          ? { kind: 'url', url: review.liveUrl }
          : { kind: 'zip', entryFile: 'index.html', bundleSha256: '0'.repeat(64), bundleUrl: `${reviewerOrigin}/reviews/${review.capability}/bundle.zip` },
        submittedAt: new Date().toISOString(),
        ...body,
      }
      return send(response, 200, { 'content-type': 'application/json' }, JSON.stringify(review.review))
    }
    if (match[2] || request.method !== 'GET') return send(response, 405, { 'content-type': 'text/plain' }, 'method not allowed')
    const view: ReviewerPageView = {
      reviewId: review.reviewId,
      status: review.status,
      source: review.liveUrl
        ? { kind: 'url', url: review.liveUrl }
        : { kind: 'zip', entryFile: 'index.html', bundleUrl: `${reviewerOrigin}/reviews/${review.capability}/bundle.zip` },
      frameUrl: `${siteOrigin}${review.liveUrl ? new URL(review.liveUrl).pathname : '/index.html'}`,
      siteOrigin,
      snapshotUrl: review.liveUrl ? `${siteOrigin}${SITE_RESERVED_PREFIX}snapshot` : null,
      submitUrl: `${reviewerOrigin}/reviews/${review.capability}/submission`,
      review: review.review,
    }
    send(
      response,
      200,
      {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': `default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; frame-src http://*.localhost:${sitePort}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
        'referrer-policy': 'no-referrer',
      },
      reviewerAssets.render(view),
    )
  })

  const site = createServer((request, response) => {
    siteRequests.push({ url: request.url ?? '', referer: request.headers.referer })
    const path = new URL(request.url ?? '/', siteOrigin).pathname
    // The screenshot page of a live URL (the real one shows an image of the page).
    if (path === `${SITE_RESERVED_PREFIX}snapshot`) {
      return send(
        response,
        200,
        { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': `frame-ancestors ${reviewerOrigin}` },
        '<!doctype html><html><head><title>Screenshot</title></head><body><p id="shot">A screenshot of the page</p></body></html>',
      )
    }
    if (path.startsWith(SITE_RESERVED_PREFIX)) {
      const file = siteAssets!.get(path.slice(SITE_RESERVED_PREFIX.length))
      if (!file) return send(response, 404, { 'content-type': 'text/plain' }, 'not found')
      return send(response, 200, { 'content-type': file.contentType, etag: file.etag }, file.body)
    }
    if (path === '/app.js') return send(response, 200, { 'content-type': 'text/javascript; charset=utf-8' }, SITE_SCRIPT)
    if (path === '/' || path === '/index.html') {
      return send(response, 200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': `frame-ancestors ${reviewerOrigin}` }, siteHtml(siteAssets!.headTags))
    }
    send(response, 404, { 'content-type': 'text/plain' }, 'not found')
  })

  const reviewerPort = await listen(reviewer)
  sitePort = await listen(site)
  reviewerOrigin = `http://127.0.0.1:${reviewerPort}`
  siteOrigin = `http://s-test.localhost:${sitePort}`
  siteAssets = createSiteAssets(reviewerOrigin)

  const browser: Browser = await launchChromium()
  t.teardown(async () => {
    await browser.close()
    reviewer.closeAllConnections()
    site.closeAllConnections()
    await new Promise((resolve) => reviewer.close(resolve))
    await new Promise((resolve) => site.close(resolve))
  })

  function newReview(liveUrl?: string): Review {
    const review: Review = { reviewId: randomUUID(), capability: randomBytes(24).toString('base64url'), status: 'open', review: null, submissions: [], liveUrl }
    reviews.set(review.capability, review)
    return review
  }

  /** Page errors and CSP violations of the reviewer page fail the test. */
  function watch(page: Page): string[] {
    const problems: string[] = []
    page.on('pageerror', (error) => {
      // The site's own uncaught errors are reported here too; only the reviewer page's count.
      if (!error.stack?.includes(siteOrigin)) problems.push(`pageerror: ${error.message} ${error.stack}`)
    })
    page.on('console', (message) => {
      if (/Content.Security.Policy|Refused to/i.test(message.text()) && !message.text().includes('example.invalid')) problems.push(`console: ${message.text()}`)
    })
    return problems
  }

  await t.test('desktop: pin by mouse and keyboard, edit, delete, reload, submit once', async (t) => {
    const review = newReview()
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    t.teardown(() => context.close())
    const page = await context.newPage()
    const problems = watch(page)
    const shareUrl = `${reviewerOrigin}/reviews/${review.capability}`
    await page.goto(shareUrl)
    await waitForSite(page, '/index.html')

    // What the site's own scripts could see.
    const frame = await siteFrameHandle(page)
    const probe = (await frame.evaluate(() => window.__probe)) as Record<string, string>
    t.match(probe.parentHref, /^blocked:SecurityError/, 'parent.location.href is not readable')
    t.match(probe.parentDocument, /^blocked:SecurityError/, 'parent.document is not reachable')
    t.match(probe.parentStorage, /^blocked:SecurityError/, "the parent's storage is not reachable")
    t.equal(probe.referrer, '', 'document.referrer is empty')
    t.equal(probe.name, '', 'window.name is empty')
    t.notOk(probe.href?.includes(review.capability), 'the frame address has no capability')
    t.notOk(JSON.stringify(probe).includes(review.capability), 'nothing the site saw holds the capability')
    t.equal(page.url(), shareUrl, 'frame busting did not navigate the top page')
    t.equal(await pinCount(page), 0, 'spoofed picked messages added no pin')

    // 1. By mouse: the button (the site's click handler must not run).
    await pinElement(page, '[data-testid="save-button"]', 'The label does not say what is saved', 'blocking')
    t.equal(await frame.evaluate(() => window.__siteClicks), 0, "picking did not trigger the site's click handler")

    // 2. By keyboard: body → h1 → p#intro.
    await pinWithKeyboard(page, ['ArrowDown', 'ArrowDown'], 'Intro is too long', 'suggestion')

    // 3. A third pin by mouse; submitting without its comment is refused and names it; then delete it.
    await pinElement(page, 'li.jsx-123', '', 'important')
    await page.getByRole('button', { name: 'Submit review', exact: true }).click()
    await page.getByRole('alert').filter({ hasText: 'Pin 3 is missing its comment' }).waitFor()
    t.equal(await commentBox(page, 3).getAttribute('aria-invalid'), 'true', 'the pin without comment is marked invalid')
    t.equal(await page.getByRole('dialog').count(), 0, 'no confirmation while a pin lacks its comment')
    await deletePin(page, 3)
    t.equal(await pinCount(page), 2, 'the pin was deleted')

    // Edit a comment and the overall comment, then reload: the draft comes back.
    await editComment(page, 1, 'The button label does not say what is saved')
    await setOverallComment(page, 'Looks good apart from the pins.')
    await page.getByRole('button', { name: 'Show pin 1', exact: true }).click()
    await page.waitForTimeout(450) // the draft is written 400 ms after typing stops
    await page.reload()
    await waitForSite(page, '/index.html')
    t.equal(await pinCount(page), 2, 'the pins survive a reload')
    t.equal(await commentBox(page, 1).inputValue(), 'The button label does not say what is saved', 'the edited comment survives a reload')
    t.equal(await severitySelect(page, 2).inputValue(), 'suggestion', 'the severity survives a reload')
    t.equal(await page.getByRole('textbox', { name: 'Overall comment (optional)' }).inputValue(), 'Looks good apart from the pins.')
    await page.getByText(/Console messages from the page: 2 errors, 1 warning/).waitFor()

    // Submit.
    const answer = (await submitReview(page)) as ReviewJson
    t.equal(review.submissions.length, 1, 'one submission')
    const body = review.submissions[0] as SubmissionJson
    t.ok(checkSubmission(body), `the body is a ReviewSubmission ${JSON.stringify(checkSubmission.errors)}`)
    t.equal(answer.reviewId, review.reviewId)
    t.equal(body.comment, 'Looks good apart from the pins.')
    t.same(
      body.pins.map((pin) => [pin.severity, pin.comment, pin.tag, pin.page.url]),
      [
        ['blocking', 'The button label does not say what is saved', 'button', '/index.html'],
        ['suggestion', 'Intro is too long', 'p', '/index.html'],
      ],
    )
    const [button, intro] = body.pins
    t.match(button!.id, /^p_[0-9a-z]{12}$/)
    t.equal(button!.text, 'Save changes')
    t.equal(intro!.text, 'An introduction paragraph that is a bit too long.')
    t.same(intro!.point, { x: 0.5, y: 0.5 }, 'a keyboard pick points at the middle')
    t.ok(button!.point && button!.point.x > 0 && button!.point.x < 1, 'a mouse pick keeps where it was clicked')
    t.ok(button!.box.width > 0 && button!.box.height > 0)
    t.notOk(button!.selector.includes('sc-'), `hashed classes are not used (${button!.selector})`)
    const frameAfter = await siteFrameHandle(page)
    for (const [pin, expected] of [
      [button!, '[data-testid="save-button"]'],
      [intro!, '#intro'],
    ] as const) {
      t.ok(
        await frameAfter.evaluate(
          ([selector, reference]) => document.querySelector(selector) !== null && document.querySelector(selector) === document.querySelector(reference),
          [pin.selector, expected],
        ),
        `${pin.selector} finds ${expected}`,
      )
      t.ok(
        await frameAfter.evaluate(
          ([xpath, reference]) => document.evaluate(xpath!, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue === document.querySelector(reference),
          [pin.xpath, expected],
        ),
        `${pin.xpath} finds ${expected}`,
      )
    }
    const messages = body.console.map((entry) => `${entry.level} ${entry.message}`)
    t.ok(
      messages.some((m) => m.startsWith('error site failed to load widget {"code":42}')),
      `console.error is recorded: ${JSON.stringify(messages)}`,
    )
    t.ok(
      messages.some((m) => m.startsWith('warning deprecated api used')),
      'console.warn is recorded',
    )
    t.ok(
      messages.some((m) => /^error .*boom from site/.test(m)),
      'the uncaught error is recorded',
    )
    t.ok(body.console.find((entry) => entry.message.includes('boom'))?.source?.includes('/app.js:'), 'with its script and line')
    t.notOk(
      messages.some((m) => m.includes('fatal')),
      'spoofed console entries of the wrong shape are dropped',
    )
    t.equal(new Set(messages).size, messages.length, 'entries repeated by the reload are kept once')

    // Read-only now; no second submission from the UI, not even after a reload.
    t.equal(await page.getByRole('button', { name: 'Submit review' }).count(), 0, 'no submit button after submitting')
    t.equal(await page.getByRole('button', { name: 'Add a pin' }).count(), 0, 'no add button after submitting')
    t.equal(await page.evaluate((key) => localStorage.getItem(key), `agent-gateway-review:${review.reviewId}`), null, 'the draft is cleared')
    await page.reload()
    await page.getByRole('heading', { name: 'Submitted — thank you' }).waitFor()
    t.equal(await page.getByRole('button', { name: 'Submit review' }).count(), 0, 'a reload shows the submitted review read-only')
    t.ok(await page.getByText('The button label does not say what is saved').isVisible(), 'with its pins')
    t.equal(review.submissions.length, 1, 'still one submission')

    // The capability never reached the site origin (addresses or Referer): the site's documents
    // come without a Referer, its subresources name the site's own pages.
    t.ok(siteRequests.length > 0)
    for (const request of siteRequests) {
      t.notOk(`${request.url} ${request.referer ?? ''}`.includes(review.capability), `no capability in ${request.url}`)
      if (request.url === '/index.html') t.equal(request.referer, undefined, 'no Referer on the document')
      else t.ok(request.referer === undefined || request.referer.startsWith(siteOrigin), `no reviewer Referer on ${request.url}`)
    }
    t.same(problems, [], 'no script errors or CSP violations on the reviewer page')
  })

  await t.test('phone width: the panel stacks below the frame, pin and submit', async (t) => {
    const review = newReview()
    const context = await browser.newContext({ viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 })
    t.teardown(() => context.close())
    const page = await context.newPage()
    const problems = watch(page)
    await page.goto(`${reviewerOrigin}/reviews/${review.capability}`)
    await waitForSite(page, '/index.html')
    const frameBox = (await page.locator('iframe[title="The page under review"]').boundingBox())!
    const panelBox = (await page.locator('#panel').boundingBox())!
    t.ok(frameBox.width >= 370, `the frame takes the width (${frameBox.width})`)
    t.ok(frameBox.height > 400 && frameBox.height < 480, `the frame is ~60vh (${frameBox.height})`)
    t.ok(panelBox.y >= frameBox.y + frameBox.height - 1, 'the panel is below the frame')
    await pinElement(page, '#intro', 'Too long on a phone', 'important')
    await setOverallComment(page, 'Checked on a phone.')
    await page.getByRole('button', { name: 'Submit review', exact: true }).scrollIntoViewIfNeeded()
    const answer = (await submitReview(page)) as ReviewJson
    t.equal(answer.pins.length, 1)
    const body = review.submissions[0] as SubmissionJson
    t.ok(checkSubmission(body), `the body is a ReviewSubmission ${JSON.stringify(checkSubmission.errors)}`)
    t.equal(body.pins[0]!.viewport.width > 300, true, 'the viewport of the frame is recorded')
    t.same(problems, [])
  })

  await t.test('live page: addresses map to the live origin, screenshot toggle, p shortcut, refused and failed submissions keep the draft', async (t) => {
    const review = newReview('https://shop.example/index.html')
    const context = await browser.newContext({ viewport: { width: 1024, height: 768 } })
    t.teardown(() => context.close())
    const page = await context.newPage()
    const problems = watch(page)
    await page.goto(`${reviewerOrigin}/reviews/${review.capability}`)
    await waitForSite(page, 'https://shop.example/index.html')
    t.ok(await page.getByText('Page: https://shop.example/index.html').isVisible(), 'the header names the live page')

    // The screenshot fallback and back.
    await page.getByRole('button', { name: 'Show a screenshot instead' }).click()
    await page.getByRole('button', { name: 'Show the live page' }).waitFor()
    await siteFrame(page).locator('#shot').waitFor()
    await page.getByRole('button', { name: 'Show the live page' }).click()
    await waitForSite(page, 'https://shop.example/index.html')

    // `p` starts picking when the focus is not in a text field.
    await page.locator('body').focus()
    await page.keyboard.press('p')
    await page.getByRole('status').filter({ hasText: 'Click an element in the page' }).waitFor()
    await siteFrame(page).locator('[data-testid="save-button"]').click()
    await commentBox(page, 1).fill('Wrong colour')
    t.equal(await page.getByRole('button', { name: 'Add a pin' }).count(), 1)

    // A 400 naming a field: shown with its detail and the pin; nothing is lost.
    review.refuseNext = {
      status: 400,
      problem: { title: 'Request validation failed', detail: 'body.pins/0/comment must NOT have more than 10000 characters', field: 'body.pins.0.comment' },
    }
    const refused = (await submitReview(page)) as { status: number }
    t.equal(refused.status, 400)
    const alert = page.getByRole('alert')
    await alert.filter({ hasText: 'must NOT have more than 10000 characters' }).waitFor()
    t.match(await alert.textContent(), /The problem is in pin 1\./, 'the field is named')
    t.equal(await commentBox(page, 1).inputValue(), 'Wrong colour', 'the draft is kept')

    // No answer at all: the draft is kept and the reviewer can retry.
    await page.route('**/submission', (route) => route.abort('connectionrefused'))
    await page.getByRole('button', { name: 'Submit review', exact: true }).click()
    await page.getByRole('button', { name: 'Yes, submit' }).click()
    await alert.filter({ hasText: 'could not be sent' }).waitFor()
    t.equal(await page.getByRole('button', { name: 'Submit review', exact: true }).isEnabled(), true, 'the submit button is back')
    await page.unroute('**/submission')

    await submitReview(page)
    const body = review.submissions.at(-1) as SubmissionJson
    t.ok(checkSubmission(body), `the body is a ReviewSubmission ${JSON.stringify(checkSubmission.errors)}`)
    t.equal(body.pins[0]!.page.url, 'https://shop.example/index.html', "page.url is the live page's address")
    t.equal(review.submissions.length, 2, 'the refused submission and the accepted one (the aborted one never arrived)')
    t.same(problems, [])
  })
})
