#!/usr/bin/env bash
# bench/gpu_check.sh's plan, without a GPU and without running a step: every stage's step
# limits, plus each step's kill grace and the reserve, fit its budget (stage 1 in 240 s,
# the ratio's steps first); a budget too small for them stops the script (exit 2) before
# any step runs; and every step of a stage takes its limit from an L_* variable that the
# stage's plan_check sums (a literal limit, or one left out of the sum, would escape it).
# Stage 3 runs a second smoke run with MRCNN_ROI_BWD=gather and the summary shows it and the
# op benchmark's backward rows as the model calls them (bench_gpu_ops' "bwd relu+write").
set -u
cd "$(dirname "$0")/../.."
S=bench/gpu_check.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/out.txt" ] && cat "$tmp/out.txt"; exit 1; }

GPU_CHECK_PLAN_ONLY=1 GPU_CHECK_STAGE=all GPU_CHECK_OUT=$tmp/o timeout 20 bash $S > "$tmp/out.txt" 2>&1 \
    || fail "the default plan does not fit (exit $?)"
for st in 1 2 3; do grep -qE "^gpu_check: stage $st plan: .* = [0-9]+s of [0-9]+s$" "$tmp/out.txt" || fail "no stage $st plan"; done
grep -qE "^gpu_check: stage 1 plan: .* of 240s$" "$tmp/out.txt" || fail "stage 1's budget is not 240 s"
grep -q "^== " "$tmp/out.txt" && fail "a step ran in plan-only mode"
awk '/ plan: / { need = $(NF-2); sub(/s$/, "", need); b = $NF; sub(/s$/, "", b); if (need + 0 > b + 0) bad = 1 } END { exit bad }' \
    "$tmp/out.txt" || fail "a stage's plan exceeds its budget"

GPU_CHECK_PLAN_ONLY=1 GPU_CHECK_STAGE=1 GPU_CHECK_BUDGET=200 GPU_CHECK_OUT=$tmp/o timeout 20 bash $S > "$tmp/out.txt" 2>&1
[ $? -eq 2 ] && grep -q "STOP: stage 1's step limits need" "$tmp/out.txt" || fail "a 200 s budget for stage 1 should stop the script"

# stage 1's order: torchvision, then bench train, then the op table, then the model test
order=$(grep -nE 'step "torchvision train"|bench_train "\$first_dt" \$L_BENCH1|step "op table |gpu_model_test "\$\{GPU_MODEL_STEPS_1' $S | cut -d: -f1 | tr '\n' ' ')
set -- $order
[ $# -eq 4 ] && [ "$1" -lt "$2" ] && [ "$2" -lt "$3" ] && [ "$3" -lt "$4" ] || fail "stage 1's order (lines: $order)"

# the limits: each stage section's step calls use L_* variables, all of them in its plan_check
for st in 1 2 3; do
    next=$((st + 1))
    body=$(awk -v a="=== stage $st ===" -v b="=== stage $next ===" 'index($0, a) { on = 1; next } index($0, b) || /^# ---- summary/ { on = 0 } on' $S)
    used=$(echo "$body" | grep -E '^\s*(\[.*\] && |\[.*\] \|\| |.*\|\| *)?(step|bench_train|gpu_model_test|cuda_ops) ' |
        grep -oE '\$L_[A-Z0-9_]+' | sort -u)
    literal=$(echo "$body" | grep -E '^\s*(if )?step "[^"]*" [0-9]+ ')
    [ -z "$literal" ] || fail "stage $st: a step with a literal limit: $literal"
    summed=$(grep -E "plan_check $st " $S | grep -oE '\$L_[A-Z0-9_]+' | sort -u)
    [ -n "$used" ] || fail "stage $st: no step limits found"
    for v in $used; do echo "$summed" | grep -qx "$v" || fail "stage $st: $v is used but not in its plan_check"; done
done
# stage 3: a second smoke run with ROIAlign's backward by gather, after the first (it trains on
# the first's data), under its own summed limit, and its line in the summary
smoke=$(grep -nE '^\s*step "smoke train \(' $S | cut -d: -f1)
gather=$(grep -nE '^\s*step "smoke train gather .*\$L_SMOKE_GATHER env MRCNN_ROI_BWD=gather' $S | cut -d: -f1)
[ -n "$smoke" ] && [ -n "$gather" ] && [ "$smoke" -lt "$gather" ] || fail "stage 3: no MRCNN_ROI_BWD=gather smoke run after the smoke run"
grep -E 'plan_check 3 ' $S | grep -q '\$L_SMOKE_GATHER' || fail "stage 3: L_SMOKE_GATHER not in its plan_check"
grep -q 'echo "smoke roi gather .*\$smoke_gather_line"' $S || fail "the summary does not print the gather smoke line"
# the op benchmark's backward rows as the model calls them, and the summary lines that show them
for row in 'conv %s bwd relu+write' 'conv %s bwd zero+relu+add' 'linear %dx%d->%d bwd relu+write' \
    'deconv2x2 %d@%dx%d x%d bwd relu+write'; do
    grep -qF "\"$row" bench/bench_gpu_ops.c || fail "bench_gpu_ops has no row \"$row\""
done
grep -qF 'grep -E "^conv .* bwd (relu\+write|zero\+relu\+add)" "$BENCH_OUT"' $S || fail "the summary does not list the conv backward rows"
# stage 3's other test programs share one allowance, summed once
grep -E 'plan_check 3 ' $S | grep -q '\$L_OTHERS' && grep -q 'others_end=\$((\$(date +%s) + L_OTHERS))' $S ||
    fail "stage 3's other tests are not bounded by L_OTHERS"
echo "gpu_check plan: ok"
