// Text → terms for the blind index and the lexical embedder: normalisation (NFKC, locale-free
// lowercase, invisible format characters), word tokens of every script, stopwords, the 64-char cap,
// Porter2 stems for Latin script only, CJK bigrams; hostile strings never throw and cost time
// linear in their length. Also countTokens (cl100k_base): equal to js-tiktoken's encode on mixed
// text, special tokens counted as text, and fast on the inputs js-tiktoken's own merge stalls on.
import t from 'tap'
import { Tiktoken } from 'js-tiktoken/lite'
import cl100k from 'js-tiktoken/ranks/cl100k_base'
import { countTokens } from '../../src/memory/embeddings/tokens.ts'
import { MAX_TOKEN_LENGTH, normalizeForMac, stemToken, termsOf, tokensOf } from '../../src/memory/search/text.ts'

t.test('lowercase, NFKC, stopwords out, negation kept, stems', async (t) => {
  t.same(termsOf('The user IS running and RUNS daily'), ['user', 'run', 'run', 'daili'])
  t.same(termsOf('ﬁle ＦＵＬＬ width'), ['file', 'full', 'width'], 'NFKC folds ligatures and full-width forms')
  t.same(termsOf('She does not like tea, nor coffee; no sugar'), ['not', 'like', 'tea', 'nor', 'coffe', 'no', 'sugar'])
  t.same(termsOf("The user's preferences"), ['user', 'prefer'], 'possessive and plural stem away')
  t.same(termsOf('user’s café'), ['user', 'café'], 'a typographic apostrophe is an apostrophe')
  t.same(termsOf('dark-mode e-mail'), ['dark', 'mode', 'e', 'mail'], 'hyphens separate words')
  t.same(termsOf('VS Code 1.85.2 v2'), ['vs', 'code', '1', '85', '2', 'v2'], 'digits are tokens; mixed tokens are not stemmed')
  t.same(termsOf(''), [])
  t.same(termsOf('the of and to'), [], 'only stopwords')
})

t.test('lowercasing does not depend on the locale (Turkish I)', async (t) => {
  t.same(termsOf('INDIGO'), ['indigo'])
  t.equal(tokensOf('İstanbul')[0]?.normalize('NFC'), 'i̇stanbul'.normalize('NFC'), 'dotted capital I lowercases as Unicode says, not per locale')
})

t.test('non-Latin scripts are kept as words, unstemmed; CJK becomes bigrams', async (t) => {
  t.same(termsOf('бегущий человек'), ['бегущий', 'человек'])
  t.same(termsOf('مرحبا بالعالم'), ['مرحبا', 'بالعالم'])
  t.same(termsOf('深色模式'), ['深色', '色模', '模式'])
  t.same(termsOf('東京タワー。'), ['東京', '京タ', 'タワ', 'ワー'], 'ideographic punctuation is not a letter')
  t.same(termsOf('猫'), ['猫'], 'a lone ideograph is its own token')
  t.same(termsOf('𠀋𠀌'), ['𠀋𠀌'], 'astral ideographs stay whole')
  t.equal(stemToken('running'), 'run')
  t.equal(stemToken('бегущий'), 'бегущий')
})

t.test('tokens over 64 code units are dropped', async (t) => {
  const long = 'a'.repeat(MAX_TOKEN_LENGTH + 1)
  const edge = 'b'.repeat(MAX_TOKEN_LENGTH)
  t.same(tokensOf(`${long} ${edge} kept`), [edge, 'kept'])
})

t.test('invisible format characters join, NUL and zero-width space separate', async (t) => {
  t.same(termsOf('pass\u00adword'), ['password'], 'soft hyphen')
  t.same(termsOf('dark\u200dmode \u200fhello\u200e'), ['darkmod', 'hello'], 'ZWJ and RTL/LTR marks')
  t.same(termsOf('zero\u200bwidth'), ['zero', 'width'], 'zero-width space separates')
  t.same(termsOf('left\u0000right'), ['left', 'right'], 'NUL separates')
  t.same(termsOf('\ufeffbom'), ['bom'])
})

t.test('hostile strings never throw and take linear time', async (t) => {
  const MB = 1 << 20
  const cases: [string, string][] = [
    ['lone surrogates', '\ud800x\udc00y'.repeat(MB / 4)],
    ['one 1 MB word', 'a'.repeat(MB)],
    ['apostrophe chain', "a'".repeat(MB / 2)],
    ['NUL', '\u0000'.repeat(MB)],
    ['ZWJ and RTL marks', 'a\u200d\u200f'.repeat(MB / 3)],
    ['combining marks', 'e\u0301'.repeat(MB / 2)],
    ['ideographs', '中文'.repeat(MB / 2)],
    ['words', 'running dogs jumped '.repeat(MB / 20)],
  ]
  for (const [name, text] of cases) {
    const started = performance.now()
    const terms = termsOf(text)
    const ms = performance.now() - started
    t.ok(Array.isArray(terms) && terms.every((term) => term.length > 0 && term.length <= MAX_TOKEN_LENGTH && term.isWellFormed()), `${name}: well-formed terms`)
    t.ok(ms < 3000, `${name}: ${ms.toFixed(0)} ms for ${text.length} units`)
  }
  // Linear: 4x the input costs about 4x (allow a wide margin for a noisy machine).
  const unit = 'the quick brown fox, naïve café 東京 '.repeat(8192)
  const time = (text: string): number => {
    const started = performance.now()
    termsOf(text)
    return performance.now() - started
  }
  time(unit)
  const small = Math.min(time(unit), time(unit))
  const large = Math.min(time(unit.repeat(4)), time(unit.repeat(4)))
  t.ok(large < small * 12 + 20, `4x input: ${small.toFixed(1)} ms → ${large.toFixed(1)} ms`)
})

t.test('normalizeForMac: NFKC, trimmed, well-formed, case kept', async (t) => {
  t.equal(normalizeForMac('  Ｗｏｒｋ\t'), 'Work')
  t.equal(normalizeForMac('Work'), normalizeForMac(' Work '))
  t.not(normalizeForMac('work'), normalizeForMac('Work'))
  t.equal(normalizeForMac('a\ud800'), 'a\ufffd')
})

t.test('countTokens matches js-tiktoken cl100k_base on mixed text', async (t) => {
  const reference = new Tiktoken(cl100k)
  const samples = [
    'Hello, world! This is a test.',
    'The user prefers dark mode   \n\n  in VS Code 1.85.2 — naïve café 東京タワー 🎉👍🏽',
    '  leading and trailing   ',
    "a\r\n\r\n  b\t\tc don't we'll I'M",
    'const x = { a: [1, 2, 3], "b": null }; // code\n\tif (x) return 42',
    'https://example.com/path?q=1&r=two#frag',
  ]
  for (const text of samples) t.equal(countTokens(text), reference.encode(text, [], []).length, JSON.stringify(text.slice(0, 40)))
  // A long pseudo-random mix of words, numbers, punctuation, whitespace runs, CJK and emoji.
  const parts = ['alpha', 'Beta', 'gammagamma', ' ', '  ', '\n', '\n\n', '123456', '...', 'Ωmega', "don't", '😀', '\t', '東京', 'naïve', '!?', '\u00a0']
  let seed = 1
  let mixed = ''
  while (mixed.length < 50_000) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff
    mixed += parts[seed % parts.length]
    if (seed % 3 !== 0) mixed += ' '
  }
  t.equal(countTokens(mixed), reference.encode(mixed, [], []).length, '50k mixed characters')
  t.equal(countTokens(''), 0)
})

t.test('countTokens: special tokens are text, hostile strings are fast', async (t) => {
  const reference = new Tiktoken(cl100k)
  t.equal(countTokens('<|endoftext|> and <|fim_prefix|>'), reference.encode('<|endoftext|> and <|fim_prefix|>', [], []).length)
  t.equal(countTokens('a\ud800b'), countTokens('a\ufffdb'), 'a lone surrogate counts as U+FFFD')
  const MB = 1 << 20
  // js-tiktoken's merge is quadratic in a piece: each of these would take minutes there.
  const cases: [string, string][] = [
    ['1 MB of one letter', 'a'.repeat(MB)],
    ['1 MB of lone surrogates', '\udc00'.repeat(MB)],
    ['1 MB of spaces', ' '.repeat(MB)],
    ['1 MB of ideographs', '中'.repeat(MB)],
    ['punctuation', '!?'.repeat(MB / 2)],
  ]
  for (const [name, text] of cases) {
    const started = performance.now()
    const tokens = countTokens(text)
    const ms = performance.now() - started
    t.ok(Number.isInteger(tokens) && tokens > 0, `${name}: ${tokens} tokens`)
    t.ok(ms < 8000, `${name}: ${ms.toFixed(0)} ms`)
  }
  // Exact on long pieces too: a 2,000-letter word against js-tiktoken (slow but bounded there).
  const word = 'ab'.repeat(1000)
  t.equal(countTokens(word), reference.encode(word, [], []).length, 'a 2,000-letter piece')
})
