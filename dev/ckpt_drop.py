#!/usr/bin/env python3
"""A tdpipe checkpoint without some of its sections: for tests that need a run to resume from the same
state less what those sections held (the int8 sync's residuals: `grad_ef`). The container is
llmc/checkpoint.h's: a 256 x int32 header ([2] section count, [7..8] file bytes, [255] CRC32 of the
bytes before it), then per section an 80-byte descriptor (name at 0, compressed bytes at 48) and its
zlib stream. The sections kept are copied byte for byte; only the header is written anew.

Usage: dev/ckpt_drop.py IN OUT PREFIX...   (drops every section whose name starts with a PREFIX)
"""
import struct
import sys
import zlib


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    src, dst, prefixes = sys.argv[1], sys.argv[2], [p.encode() for p in sys.argv[3:]]
    raw = open(src, 'rb').read()
    hdr = list(struct.unpack('<256i', raw[:1024]))
    if hdr[0] != 20241130:
        sys.exit(f'{src}: not a tdpipe checkpoint (magic {hdr[0]})')
    pos, kept, dropped = 1024, [], []
    for _ in range(hdr[2]):
        name = raw[pos:pos + 32].rstrip(b'\0')
        comp = struct.unpack('<Q', raw[pos + 48:pos + 56])[0]
        (dropped if any(name.startswith(p) for p in prefixes) else kept).append((name, raw[pos:pos + 80 + comp]))
        pos += 80 + comp
    if pos != len(raw):
        sys.exit(f'{src}: {len(raw) - pos} bytes after its last section')
    body = b''.join(b for _, b in kept)
    hdr[2] = len(kept)
    hdr[7:9] = struct.unpack('<2i', struct.pack('<q', 1024 + len(body)))
    head = struct.pack('<255i', *hdr[:255])
    with open(dst, 'wb') as f:
        f.write(head + struct.pack('<I', zlib.crc32(head)) + body)
    print(f'{dst}: {len(kept)} sections kept, {len(dropped)} dropped ({b" ".join(n for n, _ in dropped).decode()})')


if __name__ == '__main__':
    main()
