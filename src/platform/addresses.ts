// The one address rule of outbound traffic we make on someone else's behalf (the sandbox egress
// proxy, the helpers' guarded fetch, upstream audio URLs, reference URLs): loopback, private,
// CGNAT, link-local (cloud metadata), unique-local, multicast and reserved addresses are refused.
// Hosts are compared as DNS sees them (normalizeHost): `LOCALHOST.`, `localhost..` and
// `127.0.0.1..` are localhost and 127.0.0.1, not other, public-looking names.
import net from 'node:net'

const V4_BLOCKED: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // CGNAT (also Alibaba's 100.100.100.200 metadata)
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local: 169.254.169.254 cloud metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments (192.0.0.192 OCI metadata)
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['168.63.129.16', 32], // Azure wireserver
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved + broadcast
]
const V6_BLOCKED: Array<[string, number]> = [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7], // unique local (also fd00:ec2::254, AWS metadata over IPv6)
  ['fe80::', 10], // link-local
  ['fec0::', 10], // old site-local
  ['ff00::', 8], // multicast
]

const blocked = new net.BlockList()
for (const [a, p] of V4_BLOCKED) blocked.addSubnet(a, p, 'ipv4')
for (const [a, p] of V6_BLOCKED) blocked.addSubnet(a, p, 'ipv6')

/** 16 bytes of an IPv6 literal, or null when it does not parse. */
function ipv6Bytes(ip: string): number[] | null {
  let s = ip.toLowerCase().replace(/%.*$/, '')
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s)
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number]
    if ([a, b, c, d].some((x) => x > 255)) return null
    s = `${s.slice(0, dotted.index) + ((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const halves = s.split('::')
  if (halves.length > 2) return null
  const parse = (part: string | undefined): number[] => (part ? part.split(':').map((h) => (/^[0-9a-f]{1,4}$/.test(h) ? parseInt(h, 16) : NaN)) : [])
  const head = parse(halves[0])
  const rest = parse(halves[1])
  const fill = 8 - head.length - rest.length
  if (halves.length === 2 && fill < 1) return null
  const groups = halves.length === 2 ? [...head, ...new Array<number>(fill).fill(0), ...rest] : head
  if (groups.length !== 8 || groups.some((g) => Number.isNaN(g))) return null
  return groups.flatMap((g) => [g >> 8, g & 0xff])
}

/**
 * True when `ip` must not be reached from a sandbox: loopback, RFC 1918, CGNAT, link-local
 * (cloud metadata), unique-local, multicast, reserved. IPv6 forms that embed an IPv4 address
 * (IPv4-mapped, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by the embedded address.
 * Anything that does not parse as an IP is treated as private.
 */
export function isPrivateAddress(ip: string): boolean {
  if (net.isIPv4(ip)) return blocked.check(ip, 'ipv4')
  if (!net.isIPv6(ip)) return true
  const b = ipv6Bytes(ip)
  if (!b) return true
  const v4 = (o: number) => `${b[o]}.${b[o + 1]}.${b[o + 2]}.${b[o + 3]}`
  const zero = (from: number, to: number) => b.slice(from, to).every((x) => x === 0)
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return isPrivateAddress(v4(12)) // ::ffff:a.b.c.d
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) return isPrivateAddress(v4(12))
  if (b[0] === 0x20 && b[1] === 0x02) return isPrivateAddress(v4(2)) // 6to4
  return blocked.check(ip, 'ipv6')
}

/** Hostnames that name this machine or a private network whatever DNS says. */
const PRIVATE_SUFFIXES = ['localhost', '.localhost', '.local', '.internal', '.home.arpa', '.lan', '.intranet']

/** Spellings WHATWG URL parsing may read as an IPv4 address (decimal, hex, octal parts). */
const NUMERIC_HOST = /^[0-9a-fx.]+$/

/**
 * A URL's host as the address rules compare it: IPv6 brackets off, lower case, every trailing dot
 * off (DNS's root label: `localhost.` is localhost), and an IPv4 spelling that only its trailing
 * dots kept from being parsed (`127.0.0.1..`, `0x7f.1..`) as its dotted quad.
 */
export function normalizeHost(host: string): string {
  if (host.startsWith('[') && host.endsWith(']')) return host.slice(1, -1).toLowerCase()
  // A loop, not /\.+$/: that regex is quadratic on a long run of inner dots.
  let end = host.length
  while (end > 0 && host.charCodeAt(end - 1) === 0x2e) end--
  const name = host.slice(0, end).toLowerCase()
  if (end === host.length || !NUMERIC_HOST.test(name)) return name
  try {
    return new URL(`http://${name}/`).hostname
  } catch {
    return name
  }
}

/**
 * true when a URL's host must not be named to anyone who will fetch it: a private, loopback or
 * reserved address (isPrivateAddress), a single-label name, or a name under a private suffix
 * (localhost, .local, .internal, …), in any case and with any trailing dots.
 */
export function isPrivateHost(host: string): boolean {
  const name = normalizeHost(host)
  if (net.isIP(name)) return isPrivateAddress(name)
  return !name.includes('.') || PRIVATE_SUFFIXES.some((suffix) => name === suffix.replace(/^\./, '') || name.endsWith(suffix))
}
