#!/usr/bin/env bash
# `mrcnn bench train` on the CPU, small: torchvision_bench.py's workload (R50-FPN, 91
# classes, 7 objects) at 128x160, 1 image, 2 timed steps. Checks the machine-readable
# last line (every field, a finite loss, img/s > 0, the CPU's max RSS as the peak), the
# timeline it writes (accepted by `mrcnn bench scaling --model`, 44.4 M parameters'
# worth of fp32 gradient bytes), fp16 runs the loss scaler, and bad arguments exit 2.
# The timed steps' result comes first (human line, then a JSON line with the timeline's
# fields null), before the forward-only and timeline passes (a run stopped there keeps
# its number); the complete JSON line is the last; --no-timeline stops after the first.
set -u
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=1
MRCNN=$BUILD/mrcnn
[ -x "$MRCNN" ] || { echo "not built: $MRCNN"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/out.txt" ] && cat "$tmp/out.txt" "$tmp/err.txt"; exit 1; }

"$MRCNN" bench train --device cpu --size 128x160 --batch 1 --steps 2 --timeline "$tmp/tl.json" \
    > "$tmp/out.txt" 2> "$tmp/err.txt" || fail "bench train exited $?"
grep -qE '^mrcnn train bf16 +bs=1 128x160: [0-9.]+ ms/iter, [0-9.]+ img/s, peak [0-9.]+ GiB' "$tmp/out.txt" \
    || fail "no human-readable img/s line"
tail -1 "$tmp/out.txt" > "$tmp/last.json"
"${PY_COCO:-python3}" - "$tmp/last.json" "$tmp/tl.json" "$tmp/out.txt" <<'PY' || fail "JSON check"
import json, math, sys
j = json.load(open(sys.argv[1]))
# the order: img/s line, the early JSON line, then the timeline, then the complete JSON
lines = open(sys.argv[3]).read().splitlines()
kinds = ["ips" if l.startswith("mrcnn train ") else "json" if l.startswith('{"bench": "train"') else
         "tl" if l.startswith("timeline: ") else "" for l in lines]
kinds = [k for k in kinds if k]
assert kinds == ["ips", "json", "tl", "json"], kinds
early = json.loads([l for l in lines if l.startswith('{"bench"')][0])
assert early["timeline"] is False and early["forward_ms"] is None and early["backward_ms"] is None, early
assert j["timeline"] is True
for k in ("step_ms", "img_per_s", "loss_first", "loss_last", "syncs_per_step", "peak_mem_mb"):
    assert early[k] == j[k], (k, early[k], j[k])
for k, v in {"bench": "train", "device": "cpu", "precision": "bf16", "batch": 1, "height": 128, "width": 160,
             "objects": 7, "steps": 2, "finite": True}.items():
    assert j[k] == v, (k, j[k], v)
for k in ("step_ms", "img_per_s", "peak_mem_mb", "activations_mb", "arenas_mb", "forward_ms", "backward_ms"):
    assert isinstance(j[k], (int, float)) and j[k] > 0, (k, j[k])
for k in ("loss_first", "loss_last"):
    assert isinstance(j[k], float) and math.isfinite(j[k]) and j[k] > 0, (k, j[k])
assert abs(j["img_per_s"] - 1000.0 / j["step_ms"]) < 1e-2 * j["img_per_s"], "img/s is not batch / step time"
# the host's round trips per timed step: each read is a wait, and a step reads its loss at least
assert 1 <= j["reads_per_step"] <= j["syncs_per_step"] and j["uploads_per_step"] >= 0, j
# the CPU backend captures no graphs: every step ran directly, and the report says so
assert j["cuda_graph"] == "off" and j["graph_replays"] == 0, j
assert j["peak_mem_mb"] > j["arenas_mb"], "max RSS below the parameter arenas"
t = json.load(open(sys.argv[2]))
b = t["buckets"]
assert t["images_per_gpu"] == 1 and len(b) >= 2
ready = [x["ready_ms"] for x in b]
assert ready == sorted(ready) and ready[-1] <= t["backward_ms"] + 1e-6, ready
# the buckets cover the whole grads arena: 44,427,953 fp32 values plus alignment padding
nb = sum(x["bytes"] for x in b)
assert 4 * 44427953 <= nb < 4 * 44427953 * 1.001, nb
print("json ok: %.3f img/s, loss %.3f -> %.3f, %d buckets" % (j["img_per_s"], j["loss_first"], j["loss_last"], len(b)))
PY
"$MRCNN" bench scaling --model "$tmp/tl.json" --gpus 8 > "$tmp/model.txt" 2>&1 || { cat "$tmp/model.txt"; fail "scaling --model refused the timeline"; }
grep -qE '^ +8 nvlink ' "$tmp/model.txt" || { cat "$tmp/model.txt"; fail "no 8-GPU prediction"; }

"$MRCNN" bench train --device cpu --precision fp16 --size 64x64 --batch 1 --objects 2 --steps 1 --warmup 0 --no-timeline \
    --set MODEL.RPN.POST_NMS_TOPK_TRAIN=200 --set MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE=64 \
    > "$tmp/out.txt" 2> "$tmp/err.txt" || fail "fp16 bench exited $?"
tail -1 "$tmp/out.txt" > "$tmp/fp16.json"
[ "$(grep -c '^{"bench": "train"' "$tmp/out.txt")" = 1 ] && ! grep -q '^timeline: ' "$tmp/out.txt" \
    || fail "--no-timeline: expected one JSON line and no timeline"
# from 65536 the scale halves once per overflowing step: scale x 2^skipped == 65536,
# at least one step applied or skipped
"${PY_COCO:-python3}" -c '
import json, math, sys
j = json.load(open(sys.argv[1]))
assert j["timeline"] is False and j["forward_ms"] is None, j
assert j["precision"] == "fp16" and j["finite"] and math.isfinite(j["loss_last"]), j
assert j["loss_scale"] * 2 ** j["skipped"] == 65536, (j["loss_scale"], j["skipped"])
print("fp16 ok: loss %.3f, %d skipped, scale %g" % (j["loss_last"], j["skipped"], j["loss_scale"]))
' "$tmp/fp16.json" || fail "fp16 line"

"$MRCNN" bench train --device cpu --size 100x160 > "$tmp/out.txt" 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "multiples of 32" "$tmp/err.txt" || fail "a bad --size should exit 2 naming the rule"
"$MRCNN" bench train --device cpu --no-timeline --timeline x.json > "$tmp/out.txt" 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "exclude each other" "$tmp/err.txt" || fail "--timeline with --no-timeline should exit 2"
"$MRCNN" bench train --device cpu --precision fp8 > "$tmp/out.txt" 2> "$tmp/err.txt"
[ $? -eq 2 ] && grep -q "got 'fp8'" "$tmp/err.txt" || fail "a bad --precision should exit 2 naming it"
echo "bench train: ok"
