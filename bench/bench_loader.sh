#!/usr/bin/env bash
# Data benchmarks (out of `make test`): converter throughput, loader throughput per
# core from 640x480 quality-90 JPEGs to 800x1067 tensors with per-stage costs, and the
# parse time and peak memory of a COCO-shaped 450 MB JSON.
#   BUILD=build/release bash bench/bench_loader.sh     (env: N images, JSON_MB, KEEP=1)
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
PREP=$BUILD/mrcnn-prep
BL=$BUILD/bench/bench_loader
N=${N:-400}
JSON_MB=${JSON_MB:-450}
[ -x "$PREP" ] && [ -x "$BL" ] || { echo "build first: make BUILD=$BUILD"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
T=$(mktemp -d)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$T"' EXIT
echo "== data benchmarks ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)), scratch $T"

echo "-- synthetic COCO-like images: $N x 640x480, JPEG quality 90, noise 32"
/usr/bin/time -f "   generated in %e s" "$PREP" shapes --out "$T/d" --train "$N" --val 0 --size 480x640 --quality 90 --noise 32 > /dev/null || exit 1
echo "   $(du -sb "$T/d/train" | awk -v n="$N" '{printf "%.0f KB per image", $1 / n / 1000}')"

for np in 1 2; do
    echo "-- converter, $np rank(s), 8 shards"
    rm -rf "$T/s"
    mpirun --oversubscribe -np $np "$PREP" coco --annotations "$T/d/annotations/instances_train.json" --images "$T/d/train" \
        --out "$T/s" --shards 8 --name b | grep -E "images  |seconds" | sed 's/^/  /' || exit 1
done

echo "-- loader, 1 rank x 1 worker (masks on), 800x1067 output"
mpirun -np 1 "$BL" "$T/s/b-index.h5" --workers 1 --batch 2 --steps 100 || exit 1
echo "-- loader, 1 rank x 1 worker (masks off)"
mpirun -np 1 "$BL" "$T/s/b-index.h5" --workers 1 --batch 2 --steps 100 --no-masks || exit 1
echo "-- loader, 1 rank x 2 workers, each batch followed by a 60 ms simulated step (prefetch overlap)"
mpirun -np 1 "$BL" "$T/s/b-index.h5" --workers 2 --batch 2 --steps 40 --step-ms 60 || exit 1
echo "-- loader, 2 ranks x 1 worker (masks on)"
mpirun --oversubscribe -np 2 "$BL" "$T/s/b-index.h5" --workers 1 --batch 2 --steps 60 || exit 1

echo "-- COCO-shaped JSON, ${JSON_MB} MB: parse + resolve (every polygon to RLE), peak RSS"
python3 bench/gen_coco_json.py "$T/big.json" "${JSON_MB}e6" | sed 's/^/   /' || exit 1
mkdir -p "$T/noimages"
python3 - "$PREP" "$T" <<'PY' || exit 1
import resource, subprocess, sys, time
prep, t = sys.argv[1:3]
t0 = time.time()
p = subprocess.run([prep, "coco", "--annotations", f"{t}/big.json", "--images", f"{t}/noimages", "--out", f"{t}/bigout",
                    "--name", "big"], capture_output=True, text=True)
wall = time.time() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
lines = [l for l in p.stdout.splitlines() if "seconds" in l or "annotations" in l]
for l in lines: print("  " + l)
print(f"   wall {wall:.1f} s for the whole run (images absent: every one reported missing), peak RSS {rss:.0f} MB")
sys.exit(p.returncode)
PY
