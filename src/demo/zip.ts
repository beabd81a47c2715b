// A zip archive of stored (uncompressed) entries, built in memory: enough for the demo's tiny
// site. Layout per APPNOTE.TXT: a local header and the data for each entry, then the central
// directory and its end record. CRC-32 from node:zlib.
import { crc32 } from 'node:zlib'

const DOS_DATE_1980_01_01 = (0 << 9) | (1 << 5) | 1 // year offset 0, month 1, day 1
const UTF8_NAMES = 1 << 11 // general purpose bit 11: names are UTF-8

/** A zip holding `files` (path → content) as stored entries. */
export function storedZip(files: Record<string, string | Uint8Array>): Buffer {
  const parts: Buffer[] = []
  const central: Buffer[] = []
  let offset = 0
  for (const [name, content] of Object.entries(files)) {
    const nameBytes = Buffer.from(name, 'utf8')
    const data = typeof content === 'string' ? Buffer.from(content, 'utf8') : Buffer.from(content)
    const crc = crc32(data)

    const local = Buffer.alloc(30)
    local.writeUInt32LE(0x04034b50, 0) // local file header signature
    local.writeUInt16LE(10, 4) // version needed: 1.0
    local.writeUInt16LE(UTF8_NAMES, 6)
    local.writeUInt16LE(0, 8) // method: stored
    local.writeUInt16LE(0, 10) // time 00:00
    local.writeUInt16LE(DOS_DATE_1980_01_01, 12)
    local.writeUInt32LE(crc, 14)
    local.writeUInt32LE(data.length, 18) // compressed size
    local.writeUInt32LE(data.length, 22) // uncompressed size
    local.writeUInt16LE(nameBytes.length, 26)
    local.writeUInt16LE(0, 28) // extra field length
    parts.push(local, nameBytes, data)

    const entry = Buffer.alloc(46)
    entry.writeUInt32LE(0x02014b50, 0) // central directory header signature
    entry.writeUInt16LE((3 << 8) | 20, 4) // made by: Unix, 2.0
    entry.writeUInt16LE(10, 6)
    entry.writeUInt16LE(UTF8_NAMES, 8)
    entry.writeUInt16LE(0, 10)
    entry.writeUInt16LE(0, 12)
    entry.writeUInt16LE(DOS_DATE_1980_01_01, 14)
    entry.writeUInt32LE(crc, 16)
    entry.writeUInt32LE(data.length, 20)
    entry.writeUInt32LE(data.length, 24)
    entry.writeUInt16LE(nameBytes.length, 28)
    // extra, comment, disk number start, internal attributes: 0
    entry.writeUInt32LE((0o100644 << 16) >>> 0, 38) // external attributes: a regular file, rw-r--r--
    entry.writeUInt32LE(offset, 42)
    central.push(entry, nameBytes)

    offset += local.length + nameBytes.length + data.length
  }
  const directory = Buffer.concat(central)
  const end = Buffer.alloc(22)
  end.writeUInt32LE(0x06054b50, 0) // end of central directory signature
  end.writeUInt16LE(Object.keys(files).length, 8) // entries on this disk
  end.writeUInt16LE(Object.keys(files).length, 10) // entries in all
  end.writeUInt32LE(directory.length, 12)
  end.writeUInt32LE(offset, 16)
  return Buffer.concat([...parts, directory, end])
}
