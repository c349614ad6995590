#!/usr/bin/env bash
# Event files written in C are read back by TensorBoard's own EventAccumulator;
# the metrics.json lines parse as JSON.
set -u
prog=$BUILD/tests/train/prog_events
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
$PY_COCO -c 'import tensorboard' 2>/dev/null || skip tensorboard "pip package tensorboard missing for $PY_COCO (make deps)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$prog" "$tmp" || { echo "FAIL: prog_events"; exit 1; }
$PY_COCO - "$tmp" <<'PY' || exit 1
import glob, json, math, sys, zlib
d = sys.argv[1]
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
files = glob.glob(d + "/events.out.tfevents.*")
assert len(files) == 1, files
acc = EventAccumulator(d, size_guidance={"scalars": 0})
acc.Reload()
tags = acc.Tags()["scalars"]
for t in ["total_loss", "losses/loss_rpn_cls", "losses/loss_mask", "lr", "loss_scale", "perf/img_per_s", "perf/syncs_per_step"]:
    assert t in tags, (t, tags)
ev = acc.Scalars("losses/loss_rpn_cls")
assert [e.step for e in ev] == list(range(1, 51)), [e.step for e in ev]
for e in ev:
    assert abs(e.value - 1.0 / e.step) < 1e-6, (e.step, e.value)
lr = acc.Scalars("lr")
assert abs(lr[9].value - 0.1) < 1e-6, lr[9]
assert acc.Scalars("loss_scale")[0].value == 65536.0
# The CRCs are really checked by the reader: a corrupted byte must be noticed.
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
raw = open(files[0], "rb").read()
import struct
n = struct.unpack("<Q", raw[:8])[0]
assert struct.unpack("<I", raw[8:12])[0] == masked_crc32c(raw[:8])
assert struct.unpack("<I", raw[12 + n:16 + n])[0] == masked_crc32c(raw[12:12 + n])
lines = [json.loads(l) for l in open(d + "/metrics.json")]
assert len(lines) == 50 and lines[4]["step"] == 5 and abs(lines[4]["loss_rpn_cls"] - 0.2) < 1e-9
print("tensorboard: %d scalar tags, %d events each" % (len(tags), len(ev)))
PY
echo PASS
