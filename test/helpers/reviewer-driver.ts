// Drives the reviewer page (src/reviews/ui/reviewer.html) in Chromium the way a person does: by
// roles and labels (buttons "Add a pin", "Submit review", "Yes, submit"; text boxes "Comment for
// pin N", "Overall comment (optional)"; selects "Severity of pin N"), the mouse on the site frame and
// the keyboard. playwright-core with the system Chromium (Debian's chromium; CHROMIUM_PATH overrides).
import { chromium, type Browser, type Frame, type FrameLocator, type Page } from 'playwright-core'

// The browser global of the functions evaluated in the page (the project's tsconfig has no DOM lib).
declare const document: any

export type Severity = 'blocking' | 'important' | 'suggestion'

export async function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu'],
  })
}

/** The site under review, for locating its elements (clicks go through the overlay). */
export function siteFrame(page: Page): FrameLocator {
  return page.frameLocator('iframe[title="The page under review"]')
}

/** The site frame itself, for evaluating in the site's realm (what its own scripts can see). */
export async function siteFrameHandle(page: Page): Promise<Frame> {
  const element = await page.locator('iframe[title="The page under review"]').elementHandle()
  const frame = await element?.contentFrame()
  if (!frame) throw new Error('the site frame has no content frame')
  return frame
}

/** Waits until the overlay in the frame has announced its page ("Showing /index.html …"). */
export async function waitForSite(page: Page, pageUrl = ''): Promise<void> {
  await page
    .locator('#frame-page')
    .filter({ hasText: `Showing ${pageUrl}` })
    .waitFor()
}

/** How many pins the list shows. */
export async function pinCount(page: Page): Promise<number> {
  return page.getByRole('list', { name: /^Pins/ }).getByRole('listitem').count()
}

export function commentBox(page: Page, n: number) {
  return page.getByRole('textbox', { name: `Comment for pin ${n}`, exact: true })
}

export function severitySelect(page: Page, n: number) {
  return page.getByRole('combobox', { name: `Severity of pin ${n}`, exact: true })
}

/**
 * Clicks "Add a pin" and waits until the overlay is in pick mode (it says so in the live region).
 * Waits first for the site's overlay to have loaded, so it can follow page.goto directly.
 */
export async function startPicking(page: Page, how: 'mouse' | 'keyboard' = 'mouse'): Promise<void> {
  await waitForSite(page)
  const add = page.getByRole('button', { name: 'Add a pin', exact: true })
  if (how === 'mouse') {
    await add.click()
  } else {
    await add.focus()
    await page.keyboard.press('Enter')
  }
  await page.getByRole('status').filter({ hasText: 'Click an element in the page' }).waitFor()
}

/**
 * Pins the site element matching `selector` (CSS, inside the site) with the mouse, writes the
 * comment and picks the severity. Returns the new pin's number.
 */
export async function pinElement(page: Page, selector: string, comment: string, severity: Severity = 'important'): Promise<number> {
  const n = (await pinCount(page)) + 1
  await startPicking(page, 'mouse')
  await siteFrame(page).locator(selector).click()
  const box = commentBox(page, n)
  await box.waitFor()
  // The new pin's comment box has the focus.
  await page.waitForFunction((id) => document.activeElement?.id === id, await box.getAttribute('id'))
  await box.fill(comment)
  await severitySelect(page, n).selectOption(severity)
  return n
}

/**
 * Pins an element with the keyboard only: Enter on "Add a pin", the given keys in the frame
 * (ArrowDown / ArrowUp move in document order from the focused element or body, ArrowLeft to the
 * parent, ArrowRight to the first child), Enter to pin; then types the comment into the comment box
 * (which has the focus by then) and chooses the severity with the keyboard. Returns the pin's number.
 */
export async function pinWithKeyboard(page: Page, keys: string[], comment: string, severity: Severity = 'important'): Promise<number> {
  const n = (await pinCount(page)) + 1
  await startPicking(page, 'keyboard')
  for (const key of keys) await page.keyboard.press(key)
  await page.keyboard.press('Enter')
  const box = commentBox(page, n)
  await box.waitFor()
  await page.waitForFunction((id) => document.activeElement?.id === id, await box.getAttribute('id'))
  await page.keyboard.type(comment)
  await severitySelect(page, n).selectOption(severity)
  return n
}

export async function editComment(page: Page, n: number, comment: string): Promise<void> {
  await commentBox(page, n).fill(comment)
}

export async function deletePin(page: Page, n: number): Promise<void> {
  await page.getByRole('button', { name: `Delete pin ${n}`, exact: true }).click()
}

export async function setOverallComment(page: Page, text: string): Promise<void> {
  await page.getByRole('textbox', { name: 'Overall comment (optional)' }).fill(text)
}

/** Submit review → the confirmation → Yes, submit; resolves with the server's JSON answer (after the page shows "Submitted — thank you"). */
export async function submitReview(page: Page): Promise<unknown> {
  await page.getByRole('button', { name: 'Submit review', exact: true }).click()
  const dialog = page.getByRole('dialog', { name: 'Submit this review?' })
  await dialog.waitFor()
  const answer = page.waitForResponse((response) => response.request().method() === 'POST')
  await dialog.getByRole('button', { name: 'Yes, submit' }).click()
  const response = await answer
  const json = await response.json()
  if (response.ok()) await page.getByRole('heading', { name: 'Submitted — thank you' }).waitFor()
  return json
}
