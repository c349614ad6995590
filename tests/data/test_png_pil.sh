#!/usr/bin/env bash
# PNG decoding equals PIL's Image.open(p).convert('RGB') pixel for pixel, in every colour
# type and bit depth (16-bit, grey + alpha, RGBA, palette with tRNS, 1/2/4-bit, Adam7):
# alpha and tRNS are dropped, never blended; 16-bit samples are not gamma-converted to
# linear light. The decoder is the one training, eval and `mrcnn predict` use.
set -u -o pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-build/release}
PROG=$ROOT/$BUILD/tests/data/prog_png_decode
[ -x "$PROG" ] || { echo "not built: $PROG"; exit 1; }
. "$ROOT/tests/common/skip.sh"
PY=${PY_TORCH:-/usr/bin/python3}
$PY -c 'import PIL, numpy' 2>/dev/null || skip torch "PIL/numpy not importable by $PY (the reference decoder)"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

$PY "$ROOT/tests/data/png_cases.py" "$T" > /dev/null || { echo "FAIL: png_cases.py"; exit 1; }
fails=0 n=0
for png in "$T"/*.png; do
    name=$(basename "$png" .png)
    n=$((n + 1))
    if ! "$PROG" "$png" "$T/$name.rgb" > "$T/$name.log" 2>&1; then
        echo "FAIL $name: the decoder refused it: $(cat "$T/$name.log")"; fails=$((fails + 1)); continue
    fi
    if ! cmp -s "$T/$name.rgb" "$T/$name.ref"; then
        $PY - "$T/$name.rgb" "$T/$name.ref" "$name" <<'PY'
import sys
import numpy as np
a = np.fromfile(sys.argv[1], np.uint8)
b = np.fromfile(sys.argv[2], np.uint8)
if a.size != b.size:
    print(f"FAIL {sys.argv[3]}: {a.size} bytes, PIL has {b.size}")
else:
    i = int(np.flatnonzero(a != b)[0])
    print(f"FAIL {sys.argv[3]}: {int((a != b).sum())} samples differ from PIL, first at pixel {i // 3} "
          f"channel {i % 3}: {a[i]} (PIL {b[i]}); pixel 0 = {a[:3].tolist()} (PIL {b[:3].tolist()})")
PY
        fails=$((fails + 1))
    fi
done
# Damage is still found: a file cut short, and a flipped byte in the pixel data (IDAT CRC).
$PY - "$T/rgb8.png" "$T" <<'PY' || { echo "FAIL: could not damage a PNG"; exit 1; }
import sys
data = open(sys.argv[1], "rb").read()
open(sys.argv[2] + "/cut.bad", "wb").write(data[: len(data) * 6 // 10])
at = data.index(b"IDAT") + 10
open(sys.argv[2] + "/flip.bad", "wb").write(data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:])
PY
for bad in cut flip; do
    if "$PROG" "$T/$bad.bad" "$T/$bad.rgb" > "$T/$bad.log" 2>&1; then
        echo "FAIL: a damaged PNG ($bad) decodes"; fails=$((fails + 1))
    elif ! grep -q "corrupt PNG" "$T/$bad.log"; then
        echo "FAIL: the damaged PNG ($bad) is not called corrupt: $(cat "$T/$bad.log")"; fails=$((fails + 1))
    fi
done
echo "$n cases, $fails differ from PIL or were not refused"
[ "$fails" -eq 0 ] && [ "$n" -gt 40 ] && echo "PASS: PNG decoding equals PIL's convert('RGB')"
