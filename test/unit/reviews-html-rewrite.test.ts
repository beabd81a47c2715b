// HTML and CSS rewriting of the review sites' isolated origin (src/reviews/html-rewrite.ts): where
// the overlay's head tags land (with and without <head>, behind comments, doctype, BOM, uppercase
// tags, markup that only looks like a head), the URL mapping of live pages (attributes, srcset,
// styles, <base>, <meta>), CSS url()/@import, and the proxy's mapper (src/reviews/proxy.ts).
import t from 'tap'
import { decodeBody, encodeBody, htmlContentType, injectHeadTags, rewriteCss, rewriteHtml, rewriteSrcset } from '../../src/reviews/html-rewrite.ts'
import { sitePathOf, siteUrlMapper, upstreamUrlOf } from '../../src/reviews/proxy.ts'

const TAGS = '<script src="/__agent_gateway__/overlay.js"></script>'

t.test('injectHeadTags: right after the <head> start tag, else before the first content', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['head', '<!doctype html><html><head><title>x</title></head>', `<!doctype html><html><head>${TAGS}<title>x</title></head>`],
    ['head with attributes', '<html lang="en"><head data-x="1">', `<html lang="en"><head data-x="1">${TAGS}`],
    ['uppercase tags', '<!DOCTYPE HTML><HTML><HEAD><TITLE>x</TITLE>', `<!DOCTYPE HTML><HTML><HEAD>${TAGS}<TITLE>x</TITLE>`],
    ['no head: before the first element', '<!doctype html><html><body><p>x</p>', `<!doctype html><html>${TAGS}<body><p>x</p>`],
    ['no html either', '<p>x</p>', `${TAGS}<p>x</p>`],
    ['text only', 'hello', `${TAGS}hello`],
    ['empty', '', TAGS],
    ['doctype only', '<!doctype html>', `<!doctype html>${TAGS}`],
    ['whitespace and comments before head', '<!doctype html>\n<html>\n  <!-- c -->\n  <head>', `<!doctype html>\n<html>\n  <!-- c -->\n  <head>${TAGS}`],
    ['a <head> in a comment', '<!-- <head> --><html><head>', `<!-- <head> --><html><head>${TAGS}`],
    ['a <head> in an attribute', '<html data-h="<head>"><head>', `<html data-h="<head>"><head>${TAGS}`],
    ['a <head> in a script before the real one', '<script>document.write("<head>")</script><head>', `${TAGS}<script>document.write("<head>")</script><head>`],
    ['a <head> in a script inside head', '<head><script>"<head>"</script>', `<head>${TAGS}<script>"<head>"</script>`],
    ['a <head> in a textarea of the body', '<body><textarea><head></textarea>', `${TAGS}<body><textarea><head></textarea>`],
    // Outside SVG/MathML `<![CDATA[` opens a bogus comment that the first `>` closes: `]]>` is text.
    ['a <head> in CDATA-like junk', '<![CDATA[<head>]]><p>', `<![CDATA[<head>${TAGS}]]><p>`],
    ['a second head is not used', '<head></head><head>', `<head>${TAGS}</head><head>`],
    ['self-closing head', '<head/><title>t</title>', `<head/>${TAGS}<title>t</title>`],
  ]
  for (const [name, input, expected] of cases) t.equal(await injectHeadTags(input, TAGS), expected, name)
})

t.test('injectHeadTags: a BOM stays the first character', async (t) => {
  t.equal(await injectHeadTags('\uFEFF<html><head>', TAGS), `\uFEFF<html><head>${TAGS}`)
  t.equal(await injectHeadTags('\uFEFFhello', TAGS), `\uFEFF${TAGS}hello`)
  t.equal(await injectHeadTags('\uFEFF', TAGS), `\uFEFF${TAGS}`)
})

t.test('injectHeadTags: everything else is copied byte for byte', async (t) => {
  const odd =
    '<!doctype html><html><head>\n<meta charset=utf-8><title>a &amp; b</title><style>p>a{x:1}</style></head><body class=x><p>1 < 2 &lt; 3<br/><svg><path d="M0 0"/></svg><!-- end --></body></html>'
  const out = await injectHeadTags(odd, TAGS)
  t.equal(out.replace(TAGS, ''), odd)
  t.equal(out.indexOf(TAGS), odd.indexOf('<head>') + '<head>'.length)
})

t.test('decodeBody / encodeBody round-trip bytes; htmlContentType adds charset to UTF-8 pages', async (t) => {
  const utf8 = Buffer.from('\uFEFF<p>héllo</p>', 'utf8')
  const decoded = decodeBody(utf8)
  t.equal(decoded.encoding, 'utf8')
  t.ok(decoded.text.startsWith('\uFEFF'), 'the BOM is kept')
  t.ok(encodeBody(decoded.text, decoded.encoding).equals(utf8))
  const latin = Buffer.from([0x3c, 0x70, 0x3e, 0xe9, 0xa0, 0x3c, 0x2f, 0x70, 0x3e]) // <p>é\xa0</p> in windows-1252
  const other = decodeBody(latin)
  t.equal(other.encoding, 'latin1')
  t.ok(encodeBody(other.text, other.encoding).equals(latin), 'non-UTF-8 bytes come back unchanged')
  t.equal(htmlContentType('text/html', 'utf8'), 'text/html; charset=utf-8')
  t.equal(htmlContentType('text/html; charset=ISO-8859-1', 'utf8'), 'text/html; charset=ISO-8859-1')
  t.equal(htmlContentType('text/html', 'latin1'), 'text/html')
})

// A page at http://site.test/dir/page.html, mapped like the proxy does.
const DOC = new URL('http://site.test/dir/page.html')
const map = siteUrlMapper(DOC.origin, DOC)

t.test('siteUrlMapper: same origin root-relative, other origins in the x/ form, the rest left alone', async (t) => {
  const table: Array<[string, string | null]> = [
    ['img/a.png', '/dir/img/a.png'],
    ['../up.css?v=1', '/up.css?v=1'],
    ['/root.js', '/root.js'],
    ['http://site.test/abs?q=1#f', '/abs?q=1#f'],
    ['HTTP://SITE.TEST/upper', '/upper'],
    ['http://site.test:80/default-port', '/default-port'],
    ['https://site.test/other-scheme', '/__agent_gateway__/x/https/site.test/other-scheme'],
    ['http://site.test:8080/other-port', '/__agent_gateway__/x/http/site.test:8080/other-port'],
    ['//cdn.example/lib.js', '/__agent_gateway__/x/http/cdn.example/lib.js'],
    ['https://cdn.example', '/__agent_gateway__/x/https/cdn.example/'],
    ['http://[::1]:9/v6', '/__agent_gateway__/x/http/[::1]:9/v6'],
    ['/__agent_gateway__/own', '/__agent_gateway__/x/http/site.test/__agent_gateway__/own'],
    ['http://site.test//evil.example/x', '/__agent_gateway__/x/http/site.test//evil.example/x'],
    ['//site.test//evil.example/x', '/__agent_gateway__/x/http/site.test//evil.example/x'],
    ['  spaced.png  ', '/dir/spaced.png'],
    ['#top', null],
    ['', null],
    ['javascript:alert(1)', null],
    ['JavaScript:alert(1)', null],
    ['data:image/png;base64,AAAA', null],
    ['blob:http://site.test/uuid', null],
    ['mailto:a@b.c', null],
    ['about:blank', null],
    ['http://[bad', null],
  ]
  for (const [raw, expected] of table) t.equal(map(raw), expected, JSON.stringify(raw))
  t.equal(map('a.png', '/base/'), '/base/a.png', 'relative to <base href>')
  t.equal(map('a.png', 'https://cdn.example/x/'), '/__agent_gateway__/x/https/cdn.example/x/a.png', 'relative to an absolute base')
  t.equal(map('/a.png', 'https://cdn.example/x/'), '/__agent_gateway__/x/https/cdn.example/a.png')
})

t.test('siteUrlMapper in an x/ document: root-relative URLs stay on that origin', async (t) => {
  const other = siteUrlMapper('http://site.test', new URL('https://cdn.example/pkg/index.html'))
  t.equal(other('/img.png'), '/__agent_gateway__/x/https/cdn.example/img.png')
  t.equal(other('http://site.test/back'), '/back')
})

t.test('upstreamUrlOf: site paths onto the live origin, x/ paths onto theirs', async (t) => {
  const origin = 'http://site.test'
  t.equal(upstreamUrlOf(origin, '/a/b?c=1')?.href, 'http://site.test/a/b?c=1')
  t.equal(upstreamUrlOf(origin, '//evil.example/x')?.href, 'http://site.test//evil.example/x', 'a double slash stays a path')
  t.equal(upstreamUrlOf(origin, '/@evil.example')?.host, 'site.test')
  t.equal(upstreamUrlOf(origin, '/__agent_gateway__/x/https/cdn.example/lib.js?v=2')?.href, 'https://cdn.example/lib.js?v=2')
  t.equal(upstreamUrlOf(origin, '/__agent_gateway__/x/http/cdn.example:8080')?.href, 'http://cdn.example:8080/')
  t.equal(upstreamUrlOf(origin, '/__agent_gateway__/x/http/[::1]:9/v6')?.href, 'http://[::1]:9/v6')
  t.equal(upstreamUrlOf(origin, '/__agent_gateway__/x/ftp/cdn.example/'), undefined, 'http(s) only')
  t.equal(upstreamUrlOf(origin, '/__agent_gateway__/x/http/user@cdn.example/'), undefined, 'no credentials')
  t.equal(upstreamUrlOf(origin, '/__agent_gateway__/x/http/a:b@cdn.example/'), undefined)
  t.equal(upstreamUrlOf(origin, '/__agent_gateway__/x/javascript/alert(1)'), undefined)
  t.equal(upstreamUrlOf(origin, 'http://evil.example/'), undefined, 'absolute-form targets name no path')
  for (const url of [new URL('http://site.test/p?q#h'), new URL('https://cdn.example:8443/x'), new URL('http://site.test//evil.example/x')]) {
    const path = sitePathOf(origin, url)
    const back = upstreamUrlOf(origin, path.replace(/#.*$/, ''))
    t.equal(back?.href, url.href.replace(/#.*$/, ''), `round trip of ${url.href}`)
  }
})

t.test('rewriteHtml: URL attributes, srcset, styles, base and meta', async (t) => {
  const input = [
    '<!doctype html><html><head>',
    '<base href="/b/" target="_top">',
    '<meta http-equiv="Content-Security-Policy" content="default-src *">',
    '<meta http-equiv="refresh" content="5; URL=\'http://other.example/next\'">',
    '<meta name="referrer" content="unsafe-url">',
    '<meta http-equiv="set-cookie" content="a=b">',
    '<link rel="stylesheet" href="//cdn.example/a.css" integrity="sha384-x" crossorigin="anonymous">',
    '<style>body{background:url( "bg.png" )} @import \'http://site.test/x.css\';</style>',
    '</head><body style="background: url(http://other.example/i.png)" background="tile.gif">',
    '<img src="a.png" srcset="a.png 1x, http://other.example/b.png 2x" referrerpolicy="unsafe-url">',
    '<a href="#top" ping="http://tracker.example/">t</a><a href="javascript:void 0">j</a><a href="http://site.test/abs">abs</a>',
    '<form action="/submit"><input type="image" src="go.png"><button formaction="https://other.example/f">b</button></form>',
    '<video poster="p.jpg"><source src="v.mp4"><track src="t.vtt"></video><object data="o.swf"></object><iframe src="https://other.example/f"></iframe>',
    '<svg><image href="s.png"/><use xlink:href="#sym"/></svg>',
    '<script>var s = "<img src=http://evil.example/>"; var base = "<base href=/evil/>"</script>',
    '<textarea><img src="http://other.example/inert"></textarea>',
    '</body></html>',
  ].join('')
  const out = await rewriteHtml(input, map, TAGS)
  t.ok(out.startsWith(`<!doctype html><html><head>${TAGS}`), 'tags first in head')
  t.match(out, '<base target="_top">', '<base href> dropped, target kept')
  t.notMatch(out, /Content-Security-Policy/i, 'meta CSP dropped')
  t.match(out, `content="5; URL='/__agent_gateway__/x/http/other.example/next'"`, 'meta refresh rewritten')
  t.notMatch(out, /name="referrer"/, 'meta referrer dropped')
  t.notMatch(out, /set-cookie/i, 'meta set-cookie dropped')
  t.match(out, '<link rel="stylesheet" href="/__agent_gateway__/x/http/cdn.example/a.css" crossorigin="anonymous">', 'integrity dropped, protocol-relative mapped')
  t.match(out, '<style>body{background:url("/b/bg.png")} @import "/x.css";</style>', '<style> urls against <base>')
  t.match(out, 'style="background: url(&quot;/__agent_gateway__/x/http/other.example/i.png&quot;)"', 'inline style url()')
  t.match(out, 'background="/b/tile.gif"')
  t.match(out, '<img src="/b/a.png" srcset="/b/a.png 1x, /__agent_gateway__/x/http/other.example/b.png 2x">', 'srcset; referrerpolicy dropped')
  t.match(out, '<a href="#top">t</a>', 'fragment left alone, ping dropped')
  t.match(out, '<a href="javascript:void 0">j</a>', 'javascript: left alone')
  t.match(out, '<a href="/abs">abs</a>', 'absolute same-origin becomes root-relative')
  t.match(out, '<form action="/submit">')
  t.match(out, '<input type="image" src="/b/go.png">')
  t.match(out, '<button formaction="/__agent_gateway__/x/https/other.example/f">')
  t.match(out, '<video poster="/b/p.jpg"><source src="/b/v.mp4"><track src="/b/t.vtt"></video><object data="/b/o.swf"></object>')
  t.match(out, '<iframe src="/__agent_gateway__/x/https/other.example/f"></iframe>')
  t.match(out, '<image href="/b/s.png"/>')
  t.match(out, '<use xlink:href="#sym"/>')
  t.match(out, '<script>var s = "<img src=http://evil.example/>"; var base = "<base href=/evil/>"</script>', 'script text untouched')
  t.match(out, '<textarea><img src="http://other.example/inert"></textarea>', 'textarea text untouched')
})

t.test('rewriteHtml: only the first <base href> counts, and one inside a script does not', async (t) => {
  const out = await rewriteHtml('<script>"<base href=/evil/>"</script><base href="/one/"><base href="/two/"><img src="a.png">', map, '')
  t.match(out, '<img src="/one/a.png">')
  t.equal(out.split('<base').length, 2, 'both <base> tags dropped, the script text kept')
  const noBase = await rewriteHtml('<!-- <base href="/c/"> --><img src="a.png">', map, '')
  t.match(noBase, '<img src="/dir/a.png">')
})

t.test('rewriteHtml: unchanged tags keep their source bytes', async (t) => {
  const input = "<HTML><HEAD></HEAD><BODY CLASS=x><P ID='y'>text</P><IMG SRC='data:,x'></BODY></HTML>"
  t.equal(await rewriteHtml(input, map, ''), input)
})

t.test('rewriteSrcset: candidates and descriptors', async (t) => {
  const m = (raw: string) => `M(${raw})`
  t.equal(rewriteSrcset('a.png', m), 'M(a.png)')
  t.equal(rewriteSrcset(' a.png 1x ,b.png  2x', m), 'M(a.png) 1x, M(b.png) 2x')
  t.equal(rewriteSrcset('a.png 100w,b.png 200w', m), 'M(a.png) 100w, M(b.png) 200w')
  t.equal(rewriteSrcset('a.png, b.png 2x', m), 'M(a.png), M(b.png) 2x')
  t.equal(rewriteSrcset('a.png,b.png 2x', m), 'M(a.png,b.png) 2x', 'a comma inside a URL belongs to it (as browsers parse it)')
  t.equal(rewriteSrcset('a.png 1x,, b.png 2x', m), 'M(a.png) 1x, M(b.png) 2x')
  t.equal(
    rewriteSrcset('data:image/png;base64,AAA= 1x', (raw) => (raw.startsWith('data:') ? null : raw)),
    'data:image/png;base64,AAA= 1x',
  )
})

t.test('rewriteCss: url() in every quoting and @import', async (t) => {
  const m = (raw: string) => (raw.startsWith('data:') ? null : `M(${raw})`)
  const table: Array<[string, string]> = [
    ['a{b:url(x.png)}', 'a{b:url("M(x.png)")}'],
    ['a{b:url( "x y.png" )}', 'a{b:url("M(x y.png)")}'],
    ["a{b:url('x.png')}", 'a{b:url("M(x.png)")}'],
    ['a{b:URL(x.png)}', 'a{b:url("M(x.png)")}'],
    ["a{b:url('it\\'s.png')}", 'a{b:url("M(it\'s.png)")}'],
    ['a{b:url(\\66 oo.png)}', 'a{b:url("M(foo.png)")}'],
    ['a{b:url(data:image/png;base64,AAA)}', 'a{b:url(data:image/png;base64,AAA)}'],
    ["@import 'x.css';", '@import "M(x.css)";'],
    ['@import "x.css" screen;', '@import "M(x.css)" screen;'],
    ['@import url(x.css);', '@import url("M(x.css)");'],
    ['@IMPORT"x.css";', '@IMPORT"M(x.css)";'],
    ['@font-face{src:url(f.woff2) format("woff2"),url(f.woff) format("woff")}', '@font-face{src:url("M(f.woff2)") format("woff2"),url("M(f.woff)") format("woff")}'],
  ]
  for (const [input, expected] of table) t.equal(rewriteCss(input, m), expected, input)
  t.equal(
    rewriteCss('a{b:url(x".png)}', () => 'q"\\'),
    'a{b:url(x".png)}',
    'an invalid bare url() is left as is',
  )
  t.equal(
    rewriteCss('a{b:url(x.png)}', () => 'q"\\'),
    'a{b:url("q\\"\\\\")}',
    'mapped URLs are escaped as CSS strings',
  )
})
