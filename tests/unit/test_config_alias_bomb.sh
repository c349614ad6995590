#!/usr/bin/env bash
# YAML merge keys and aliases cannot multiply a config's size: an anchor keeps one entry
# per key (a later assignment replaces the earlier), and a load stops with a clear error
# past a million values. Before: a ~600-byte file with nine levels of ten merged aliases
# each appended every merged entry again (10x per level) and took gigabytes and
# minutes. Here it must load (its value is simply SOLVER.BASE_LR 0.5) in bounded time and
# memory (timeout 20 s, peak resident memory under 1 GiB). Resident, not address space:
# a build linked with the CUDA libraries maps about 1 GiB before it reads a byte.
set -u
BIN=$ROOT/$BUILD
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$ROOT/tests/common/exit_codes.sh"
source "$ROOT/tests/common/checks.sh"
M=$BIN/mrcnn
[ -x "$M" ] || { echo "FAIL: $M not built"; exit 1; }
{
    echo "SOLVER: &a0 {BASE_LR: 0.5, GAMMA: 0.2}"
    for l in 1 2 3 4 5 6 7 8 9; do
        p=$((l - 1))
        echo "SOLVER: &a$l {<<: [*a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p, *a$p]}"
    done
} > "$tmp/bomb.yaml"
echo "bomb.yaml: $(wc -c < "$tmp/bomb.yaml") bytes, 10^9 merged entries without deduplication"
t0=$(date +%s%N)
/usr/bin/time -o "$tmp/rss" -f %M timeout 20 "$M" config --config "$tmp/bomb.yaml" > "$tmp/out" 2>&1
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
rss_kb=$(tail -n1 "$tmp/rss")
[ "$rss_kb" -lt 1048576 ] 2>/dev/null || bad "nested merge keys: peak resident memory ${rss_kb} KB, want < 1 GiB"
if [ $rc -ne 0 ] || ! grep -q "^SOLVER.BASE_LR: 0.5$" "$tmp/out" || ! grep -q "^SOLVER.GAMMA: 0.2" "$tmp/out"; then
    bad "nested merge keys: exit $rc after $ms ms (want 0 and BASE_LR 0.5): $(head -c 300 "$tmp/out")"
else
    echo "nested merge keys: loaded in $ms ms"
fi
# Many aliases of a full anchor (one entry per key, so linear, but past the cap): refused.
{
    echo "SOLVER: &s {BASE_LR: 0.1, GAMMA: 0.1, MOMENTUM: 0.9, WEIGHT_DECAY: 0.0001, MAX_ITER: 10, WARMUP_ITERS: 1}"
    for i in $(seq 1 200000); do echo "SOLVER: *s"; done
} > "$tmp/many.yaml"
/usr/bin/time -o "$tmp/rss" -f %M timeout 20 "$M" config --config "$tmp/many.yaml" > "$tmp/out" 2>&1
rc=$?
rss_kb=$(tail -n1 "$tmp/rss")
[ "$rss_kb" -lt 1048576 ] 2>/dev/null || bad "200000 aliases: peak resident memory ${rss_kb} KB, want < 1 GiB"
expect_exit "$EXIT_ERROR" $rc "200000 aliases of a 6-key anchor" || head -c 300 "$tmp/out"
grep -q "more than 1000000 values after expanding aliases and merge keys" "$tmp/out" ||
    bad "the alias cap's message: $(head -c 300 "$tmp/out")"
[ $fails -eq 0 ] && echo "PASS: aliases and merge keys are bounded"
[ $fails -eq 0 ]
