#!/usr/bin/env bash
# Helpers shared by the hardening tests; sourced, never run on its own
# (the runner only runs test_*.sh).
#   fixture_shards DIR        shapes -> one-shard train set: DIR/shards/train-index.h5
#   flip_weight_byte FILE DS  flips one byte in the stored (raw, on-disk) data of dataset DS
#   h5_offset FILE DS         byte offset of DS's data in FILE (chunked or contiguous)
#   "${SOLO[@]}" PROGRAM ...  runs a program without mpirun (an Open MPI singleton)

# In the sanitizer build, LeakSanitizer's exit-time scan crashes in Open MPI singletons
# (its tracer faults on a dynamic TLS block), so leak checks
# are off for runs started without mpirun; runs under mpirun keep them, and ASan and
# UBSan stay on everywhere. `env` execs the program, so $! of a background run is its pid.
SOLO=(env)
[ "${MODE:-}" = sanitize ] && SOLO=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}detect_leaks=0")

fixture_shards() { # dir
    local d=$1
    "${SOLO[@]}" "$BUILD/mrcnn-prep" shapes --out "$d/raw" --train 32 --val 4 --size 128x128 > "$d/prep.log" 2>&1 &&
        "${SOLO[@]}" "$BUILD/mrcnn-prep" coco --annotations "$d/raw/annotations/instances_train.json" --images "$d/raw/train" \
            --out "$d/shards" --name train --shards 1 >> "$d/prep.log" 2>&1 ||
        { echo "FAIL: building the fixture shards"; cat "$d/prep.log"; return 1; }
}

h5_offset() { # file dataset
    "$PY_TORCH" - "$1" "$2" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    ds = f[sys.argv[2]]
    if ds.chunks is None:
        off = ds.id.get_offset()
    else:
        off = ds.id.get_chunk_info(0).byte_offset
    print(off + ds.id.get_storage_size() // 2)
PY
}

flip_weight_byte() { # file dataset
    local off
    off=$(h5_offset "$1" "$2") || return 1
    [ -n "$off" ] || return 1
    "$PY_TORCH" - "$1" "$off" <<'PY'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0x10]))
PY
}
