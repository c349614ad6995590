"""PNG files in every colour type and bit depth, with and without transparency and
interlacing, and what PIL makes of each (Image.open(p).convert('RGB'), the reference the
training and predict pixels must equal). Written by hand (zlib + struct), so that
16-bit, grey + alpha, tRNS and Adam7 files exist whatever PIL can save.
Usage: png_cases.py OUTDIR   -> OUTDIR/<case>.png and OUTDIR/<case>.ref (h * w * 3 RGB8 from PIL)"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.RandomState(7)
H, W = 13, 11  # odd sizes: every Adam7 pass has a ragged edge


def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def pack_row(samples, bitdepth):
    """One row of samples (already interleaved channels) as PNG bytes."""
    if bitdepth == 16:
        return b"".join(struct.pack(">H", int(v)) for v in samples)
    if bitdepth == 8:
        return bytes(int(v) for v in samples)
    per = 8 // bitdepth
    out_b = bytearray()
    for i in range(0, len(samples), per):
        byte = 0
        for j in range(per):
            v = int(samples[i + j]) if i + j < len(samples) else 0
            byte |= v << (8 - bitdepth * (j + 1))
        out_b.append(byte)
    return bytes(out_b)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def make_png(arr, bitdepth, colortype, extra=b"", interlace=0):
    """arr: (h, w, channels) samples."""
    h, w = arr.shape[:2]
    flat = lambda a: a.reshape(a.shape[0], -1)
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = arr[y0::dy, x0::dx]
            if sub.shape[0] == 0 or sub.shape[1] == 0:
                continue
            raw += b"".join(b"\0" + pack_row(r, bitdepth) for r in flat(sub))
    else:
        raw = b"".join(b"\0" + pack_row(r, bitdepth) for r in flat(arr))
    ihdr = struct.pack(">IIBBBBB", w, h, bitdepth, colortype, 0, 0, interlace)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


cases = {}


def add(name, arr, bitdepth, colortype, extra=b""):
    for il in (0, 1):
        cases[name + ("_adam7" if il else "")] = make_png(arr, bitdepth, colortype, extra, il)


def samples(channels, bitdepth):
    a = rng.randint(0, 1 << bitdepth, size=(H, W, channels))
    a[0, 0, :] = 135 << 8 if bitdepth == 16 else min(135, (1 << bitdepth) - 1)  # the pixel of the bug report
    if bitdepth == 16 and channels in (2, 4):
        a[0, 0, -1] = 128 << 8
    if bitdepth == 8 and channels in (2, 4):
        a[0, 0, -1] = 128
    return a


for bd in (8, 16):
    add(f"rgb{bd}", samples(3, bd), bd, 2)
    add(f"rgba{bd}", samples(4, bd), bd, 6)
    add(f"grey_alpha{bd}", samples(2, bd), bd, 4)
for bd in (1, 2, 4, 8):
    add(f"grey{bd}", samples(1, bd), bd, 0)
# 16-bit grey: PIL opens it as mode "I" and clips to 255 in convert('RGB'): small values matter.
g16 = rng.randint(0, 400, size=(H, W, 1))
g16[0, 0, 0] = 135
g16[1, 1, 0] = 65535
add("grey16", g16, 16, 0)
add("grey16_trns", g16, 16, 0, chunk(b"tRNS", struct.pack(">H", 135)))
add("grey8_trns", samples(1, 8), 8, 0, chunk(b"tRNS", struct.pack(">H", 135)))
add("rgb8_trns", samples(3, 8), 8, 2, chunk(b"tRNS", struct.pack(">HHH", 135, 135, 135)))
add("rgb16_trns", samples(3, 16), 16, 2, chunk(b"tRNS", struct.pack(">HHH", 135 << 8, 135 << 8, 135 << 8)))
for bd in (1, 2, 4, 8):
    n = 1 << bd
    npal = max(1, n - 1) if bd > 1 else 2  # one index past the palette's end (PIL: a grey ramp entry)
    pal = bytes(rng.randint(0, 256, size=3 * npal).astype(np.uint8))
    trns = bytes(rng.randint(0, 256, size=npal).astype(np.uint8))
    idx = rng.randint(0, n, size=(H, W, 1))
    add(f"palette{bd}_trns", idx, bd, 3, chunk(b"PLTE", pal) + chunk(b"tRNS", trns))
    add(f"palette{bd}", idx, bd, 3, chunk(b"PLTE", pal))
cases["rgb8_gamma"] = make_png(samples(3, 8), 8, 2, chunk(b"gAMA", struct.pack(">I", 100000)))
cases["rgba8_gamma_srgb"] = make_png(samples(4, 8), 8, 6, chunk(b"sRGB", b"\0") + chunk(b"gAMA", struct.pack(">I", 45455)))

import warnings

warnings.simplefilter("ignore")
for name, data in cases.items():
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert ref.shape == (H, W, 3), (name, ref.shape)
    open(os.path.join(out, name + ".png"), "wb").write(data)
    open(os.path.join(out, name + ".ref"), "wb").write(ref.astype(np.uint8).tobytes())
print(len(cases), "cases")
