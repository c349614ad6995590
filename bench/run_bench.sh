#!/usr/bin/env bash
# Runs every benchmark program built from bench/*.c (bench_ops first), saving each
# one's output under $BUILD/bench-logs/. Usage: BUILD=build/release bash bench/run_bench.sh
# Env: BUILD (build dir, relative to the repo root). Exits non-zero if any fails.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
logdir=$BUILD/bench-logs
mkdir -p "$logdir"
progs=""
[ -f bench/bench_ops.c ] && progs="bench_ops"
for src in bench/*.c; do
    [ -e "$src" ] || continue
    name=$(basename "${src%.c}")
    [ "$name" = bench_ops ] || progs="$progs $name"
done
failed=""
for name in $progs; do
    bin=$BUILD/bench/$name
    log=$logdir/$name.txt
    if [ ! -x "$bin" ]; then
        echo "not built: $bin (run make bench)"; failed="$failed $name"; continue
    fi
    echo "== $name ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$log"
    "$bin" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "$name failed with exit code $rc"; failed="$failed $name"; }
    echo
done
# Scripted benchmarks (they time Python tools in the same run): COCO evaluation vs pycocotools.
for sh in bench/bench_eval.sh; do
    [ -f "$sh" ] || continue
    name=$(basename "${sh%.sh}")
    log=$logdir/$name.txt
    echo "== $name ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$log"
    BUILD=$BUILD bash "$sh" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || { echo "$name failed with exit code $rc"; failed="$failed $name"; }
    echo
done
echo "bench output: $logdir/"
[ -z "$failed" ] || { echo "failed:$failed"; exit 1; }
