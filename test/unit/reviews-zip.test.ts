// Site zips read in memory: the good site byte for byte with its types and hashes, every attack of
// the corpus refused with its reason, status and field, a full 10 MiB zip of many files, and hostile
// bytes and names that must end in a refusal, never a crash. Also the content types of site files.
import { createHash, randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { AppError } from '../../src/platform/errors.ts'
import { contentTypeOf } from '../../src/reviews/content-types.ts'
import { ZIP_MAX_BYTES } from '../../src/reviews/limits.ts'
import type { ReadSite } from '../../src/reviews/types.ts'
import { readSiteZip } from '../../src/reviews/zip.ts'
import { seededRandom } from '../helpers/signals.ts'
import { attackCorpus, buildZip, GOOD_SITE_FILES, goodSiteZip, renamed } from '../helpers/zip-corpus.ts'

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex')
const read = (zip: Buffer, entryFile = 'index.html'): Promise<ReadSite> => readSiteZip(zip.toString('base64'), entryFile)

/** The AppError a read ends in (fails the test when it resolves or throws anything else). */
async function refusal(t: Test, reading: Promise<ReadSite>): Promise<AppError | undefined> {
  try {
    const site = await reading
    t.fail(`read ${site.files.length} files instead of refusing`)
  } catch (error) {
    if (error instanceof AppError) return error
    t.fail(`threw ${String(error)} instead of an AppError`)
  }
  return undefined
}

t.test('contentTypeOf: types from the allowlist by extension, any case; anything else a download', async (t) => {
  const expected: Array<[string, string]> = [
    ['index.html', 'text/html; charset=utf-8'],
    ['about.HTM', 'text/html; charset=utf-8'],
    ['css/site.css', 'text/css; charset=utf-8'],
    ['js/app.js', 'text/javascript; charset=utf-8'],
    ['js/module.MJS', 'text/javascript; charset=utf-8'],
    ['data.json', 'application/json'],
    ['js/app.js.map', 'application/json'],
    ['notes.txt', 'text/plain; charset=utf-8'],
    ['README.md', 'text/plain; charset=utf-8'],
    ['logo.svg', 'image/svg+xml'],
    ['a.png', 'image/png'],
    ['a.jpg', 'image/jpeg'],
    ['a.JPEG', 'image/jpeg'],
    ['a.gif', 'image/gif'],
    ['a.webp', 'image/webp'],
    ['a.avif', 'image/avif'],
    ['favicon.ico', 'image/x-icon'],
    ['f.woff', 'font/woff'],
    ['f.woff2', 'font/woff2'],
    ['f.ttf', 'font/ttf'],
    ['f.otf', 'font/otf'],
    ['s.mp3', 'audio/mpeg'],
    ['v.mp4', 'video/mp4'],
    ['v.webm', 'video/webm'],
    ['s.wav', 'audio/wav'],
    ['s.ogg', 'audio/ogg'],
    ['doc.pdf', 'application/pdf'],
    ['m.wasm', 'application/wasm'],
    ['feed.xml', 'application/xml'],
    ['table.csv', 'text/csv'],
  ]
  for (const [path, contentType] of expected) t.same(contentTypeOf(path), { contentType, attachment: false }, path)
  for (const path of ['setup.exe', 'archive.tar.gz', 'README', '.htaccess', 'page.html.bak', 'css.css/file', 'x.', 'x.constructor', 'x.__proto__', 'x.toString', '']) {
    t.same(contentTypeOf(path), { contentType: 'application/octet-stream', attachment: true }, path)
  }
})

t.test('the good site reads back byte for byte, top folder and macOS leftovers gone, in archive order', async (t) => {
  const site = await read(goodSiteZip())
  t.equal(site.entryFile, 'index.html')
  t.same(
    site.files.map((file) => file.path),
    GOOD_SITE_FILES.map((file) => file.path),
  )
  for (const [i, file] of site.files.entries()) {
    const want = GOOD_SITE_FILES[i]!
    t.ok(file.data.equals(want.data), `${file.path} bytes`)
    t.equal(file.sha256, sha256(want.data), `${file.path} sha256`)
    t.equal(file.contentType, contentTypeOf(want.path).contentType, `${file.path} type`)
  }
  t.equal(
    site.totalBytes,
    GOOD_SITE_FILES.reduce((sum, file) => sum + file.data.length, 0),
  )
  t.equal((await read(goodSiteZip(), 'site/index.html')).entryFile, 'index.html', 'entryFile may name the top folder')
  t.equal((await read(goodSiteZip(), 'css/site.css')).entryFile, 'css/site.css', 'any file may be the entry')
})

t.test('the top folder is stripped only when every file shares it', async (t) => {
  const two = await read(await buildZip([{ name: 'a/index.html' }, { name: 'b/site.css' }]), 'a/index.html')
  t.same(
    two.files.map((file) => file.path),
    ['a/index.html', 'b/site.css'],
  )
  const rooted = await read(await buildZip([{ name: 'site/page.html' }, { name: 'index.html' }]))
  t.same(
    rooted.files.map((file) => file.path),
    ['site/page.html', 'index.html'],
  )
  const nested = await read(await buildZip([{ name: 'out/site/index.html' }, { name: 'out/site/css/a.css' }]), 'site/index.html')
  t.same(
    nested.files.map((file) => file.path),
    ['site/index.html', 'site/css/a.css'],
    'one level only',
  )
  const longest = `${'x'.repeat(1019)}.html`
  t.equal((await read(await buildZip([{ name: `site/${longest}` }]), longest)).files[0]!.path, longest, 'the 1024-byte limit counts the path after stripping')
  const alone = await read(await buildZip([{ name: 'site/index.html', data: '' }]))
  t.same(alone.files, [{ path: 'index.html', data: Buffer.alloc(0), contentType: 'text/html; charset=utf-8', sha256: sha256(Buffer.alloc(0)) }])
})

t.test('names are NFC, and entryFile is matched after NFC', async (t) => {
  const zip = await buildZip([{ name: 'site/cafe\u0301.html', data: 'café' }, { name: 'site/index.html' }])
  for (const entryFile of ['caf\u00e9.html', 'cafe\u0301.html', 'site/cafe\u0301.html']) {
    const site = await read(zip, entryFile)
    t.equal(site.entryFile, 'caf\u00e9.html', JSON.stringify(entryFile))
    t.equal(site.files[0]!.path, 'caf\u00e9.html')
  }
})

t.test('every attack of the corpus is refused with its reason, status and field', async (t) => {
  const corpus = attackCorpus()
  t.ok(corpus.length >= 40, `${corpus.length} attacks`)
  const reasons = new Set(corpus.map((attack) => attack.reason))
  for (const reason of ['base64', 'too_large', 'not_zip', 'corrupt', 'entry_count', 'entry_too_large', 'total_too_large', 'ratio', 'size_mismatch'] as const) {
    t.ok(reasons.has(reason), `the corpus covers ${reason}`)
  }
  for (const attack of corpus) {
    const error = await refusal(t, readSiteZip(attack.zipBase64, attack.entryFile ?? 'index.html'))
    if (error === undefined) continue
    const problem = error.toProblem()
    t.match(
      problem,
      {
        code: attack.status === 413 ? 'zip_too_large' : 'zip_rejected',
        status: attack.status,
        field: attack.reason === 'entry_file_missing' ? 'body.entryFile' : 'body.zipData',
        reason: attack.reason,
      },
      attack.name,
    )
    if (attack.entry !== undefined) t.equal(problem.entry, attack.entry, `${attack.name}: entry`)
    if (typeof problem.entry === 'string') t.ok(problem.entry.length <= 200 && problem.entry.isWellFormed(), `${attack.name}: entry is short, well-formed text`)
    t.same(JSON.parse(JSON.stringify(problem)), problem, `${attack.name}: the problem survives JSON`)
  }
})

t.test('the ratio bomb (50 MiB of zeros) is refused for its ratio, not read', async (t) => {
  const bomb = attackCorpus().find((attack) => attack.name.startsWith('ratio bomb'))!
  const error = await refusal(t, readSiteZip(bomb.zipBase64, 'index.html'))
  t.match(error?.toProblem(), { status: 413, reason: 'ratio', entry: 'zeros.bin' })
})

t.test('a full 10 MiB zip of many files is read', async (t) => {
  const count = 1800
  // 106 bytes of headers per file (name 15 bytes, local and central), 22 for the end record.
  const size = Math.floor((ZIP_MAX_BYTES - 22) / count) - 106
  const datas = Array.from({ length: count }, () => randomBytes(size))
  const zip = await buildZip(datas.map((data, i) => ({ name: `site/f${String(i).padStart(4, '0')}.bin`, data, store: true })))
  t.ok(zip.length <= ZIP_MAX_BYTES && zip.length > ZIP_MAX_BYTES - 10_000, `${zip.length} bytes`)
  const site = await read(zip, 'f0000.bin')
  t.equal(site.files.length, count)
  t.equal(site.totalBytes, count * size)
  t.equal(site.files[1234]!.path, 'f1234.bin')
  t.equal(site.files[1234]!.sha256, sha256(datas[1234]!))
  t.equal(site.files[1234]!.contentType, 'application/octet-stream')
})

t.test('hostile names and damaged bytes end in a refusal or a read, never a crash', async (t) => {
  const random = seededRandom(20240101)
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!
  const good = goodSiteZip()
  const nameBytes = [0x2f, 0x5c, 0x2e, 0x2e, 0x00, 0x01, 0x7f, 0x3a, 0x61, 0x41, 0xc3, 0xa9, 0xcc, 0x81, 0xed, 0xa0, 0x80, 0xff, 0x20]
  let refused = 0
  let readOk = 0
  const outcome = async (zip: Buffer, what: string): Promise<void> => {
    try {
      const site = await read(zip)
      t.ok(site.files.length > 0, what)
      readOk++
    } catch (error) {
      if (error instanceof AppError && (error.code === 'zip_rejected' || error.code === 'zip_too_large')) refused++
      else t.fail(`${what}: ${String(error)}`)
    }
  }
  // Entry 1 is site/index.html: 15 bytes of name to play with.
  for (let i = 0; i < 300; i++) {
    const name = Buffer.from(Array.from({ length: 15 }, () => pick(nameBytes)))
    await outcome(renamed(good, 1, name), `name ${name.toString('hex')}`)
  }
  for (let i = 0; i < 600; i++) {
    const damaged = Buffer.from(good)
    for (let flips = 1 + Math.floor(random() * 4); flips > 0; flips--) {
      // Headers and the central directory matter most: aim half the flips at the last 40%.
      const at = random() < 0.5 ? Math.floor(damaged.length * (0.6 + 0.4 * random())) : Math.floor(damaged.length * random())
      damaged[at] = Math.floor(random() * 256)
    }
    await outcome(damaged, `damage ${i}`)
  }
  t.ok(refused > 0 && refused + readOk === 900, `${refused} refused, ${readOk} read`)
})
