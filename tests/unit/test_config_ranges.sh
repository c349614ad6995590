#!/usr/bin/env bash
# Every config key declares its type, length and range (src/core/config_keys.c) and is
# checked when it is set, from a file or --set; every count flag has a range. Before,
# each of these was accepted: a one-element BBOX_REG_WEIGHTS printed [1] while the model
# kept [10, 10, 5, 5]; a one-element RPN.IOU_THRESHOLDS kept a stale threshold; a
# two-element PIXEL_MEAN became zeros; a negative WARMUP_FACTOR gave a negative learning
# rate; an unknown RANDOM_FLIP turned flipping off; NUM_WORKERS=-1 was taken;
# MAX_ITER=0 wrote model_0000000.h5 and exited 1 from the plot; `eval --threads 100000`
# crashed, 99999999999 was truncated to an int; `predict --score-thresh nan` was taken.
set -u
BIN=$ROOT/$BUILD
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$ROOT/tests/common/exit_codes.sh"
source "$ROOT/tests/common/checks.sh" # bad
M=$BIN/mrcnn
[ -x "$M" ] || { echo "FAIL: $M not built"; exit 1; }

# key=value, then the message it must give (a fixed string: key, value, allowed set)
cases=(
    "MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS=[1]|MODEL.ROI_BOX_HEAD.BBOX_REG_WEIGHTS = [1] has 1 item; it takes exactly 4"
    "MODEL.RPN.IOU_THRESHOLDS=[0.5]|MODEL.RPN.IOU_THRESHOLDS = [0.5] has 1 item; it takes exactly 2"
    "MODEL.PIXEL_MEAN=[1,2]|MODEL.PIXEL_MEAN = [1, 2] has 2 items; it takes exactly 3"
    "SOLVER.WARMUP_FACTOR=-0.5|SOLVER.WARMUP_FACTOR = -0.5 is outside its allowed range [0, 1]"
    "INPUT.RANDOM_FLIP=diagonal|INPUT.RANDOM_FLIP = 'diagonal' is not one of the allowed values: horizontal,none"
    "DATALOADER.NUM_WORKERS=-1|DATALOADER.NUM_WORKERS = -1 is outside its allowed range [0, 256]"
    "SOLVER.MAX_ITER=0|SOLVER.MAX_ITER = 0 is outside its allowed range [1, 2147483647]"
    "SOLVER.MAX_ITER=-5|SOLVER.MAX_ITER = -5 is outside its allowed range [1, 2147483647]"
    "MODEL.PIXEL_STD=[1,0,1]|MODEL.PIXEL_STD item 1 = 0 is outside its allowed range (0, 100000]"
    "INPUT.FIXED_SIZE=[512]|INPUT.FIXED_SIZE = [512] has 1 item; it takes exactly 2 (or none: [])"
    "SOLVER.IMS_PER_BATCH=0|SOLVER.IMS_PER_BATCH = 0 is outside its allowed range [1, 1000000]"
)
for c in "${cases[@]}"; do
    kv=${c%%|*} want=${c#*|}
    key=${kv%%=*} val=${kv#*=}
    # --set
    "$M" config --set "$kv" > "$tmp/out" 2>&1
    expect_exit "$EXIT_ERROR" $? "config --set $kv" || cat "$tmp/out"
    grep -qF -- "--set: $want" "$tmp/out" || bad "config --set $kv: want '$want', got: $(head -c 300 "$tmp/out")"
    # the same from a YAML file (nested keys), naming file:line
    sect=${key%.*} leaf=${key##*.}
    printf '%s: %s\n' "$key" "$val" > "$tmp/c.yaml"
    "$M" config --config "$tmp/c.yaml" > "$tmp/out" 2>&1
    expect_exit "$EXIT_ERROR" $? "config file $kv" || cat "$tmp/out"
    grep -qF -- "c.yaml:1: $want" "$tmp/out" || bad "config file $kv: want 'c.yaml:1: $want', got: $(head -c 300 "$tmp/out")"
done
echo "config: ${#cases[@]} out-of-range values refused, each naming key, value and allowed set"
# the shipped defaults and an in-range value still load
"$M" config --set SOLVER.WARMUP_FACTOR=0 --set INPUT.RANDOM_FLIP=none --set INPUT.FIXED_SIZE=[512,512] \
    --set INPUT.FIXED_SIZE=[] > "$tmp/out" 2>&1 || bad "in-range values refused: $(cat "$tmp/out")"

# a directory given as --config: named as one (before: "YAML error: input error")
mkdir -p "$tmp/cfgdir"
"$M" config --config "$tmp/cfgdir" > "$tmp/out" 2>&1
expect_exit "$EXIT_ERROR" $? "config --config DIR" || cat "$tmp/out"
grep -qF "$tmp/cfgdir: is a directory, not a config file" "$tmp/out" || bad "--config DIR: $(head -c 300 "$tmp/out")"

# a second YAML document is refused, not merged into the first without a word
printf 'SOLVER:\n  BASE_LR: 0.1\n---\nSOLVER:\n  GAMMA: 0.5\n' > "$tmp/two.yaml"
"$M" config --config "$tmp/two.yaml" > "$tmp/out" 2>&1
expect_exit "$EXIT_ERROR" $? "config with two documents" || cat "$tmp/out"
grep -qF "two.yaml:3: a second YAML document ('---'): a config file holds one" "$tmp/out" || bad "two documents: $(head -c 300 "$tmp/out")"

# mrcnn train: a config error is a usage error (2), before anything is written
out=$tmp/train_out
"$M" train --set SOLVER.MAX_ITER=0 --set OUTPUT_DIR="$out" > "$tmp/train.log" 2>&1
expect_exit "$EXIT_USAGE" $? "train with MAX_ITER=0" || cat "$tmp/train.log"
grep -qF "SOLVER.MAX_ITER = 0 is outside its allowed range [1, 2147483647]" "$tmp/train.log" ||
    bad "train MAX_ITER=0: $(head -c 300 "$tmp/train.log")"
[ -e "$out" ] && bad "train MAX_ITER=0 created $out: $(ls "$out")"
"$M" train --set FOO > "$tmp/train.log" 2>&1
expect_exit "$EXIT_USAGE" $? "train --set FOO" || cat "$tmp/train.log"

# count flags: one range each, nothing truncated, no NaN
flag() { # want-substring command...
    local want=$1
    shift
    "$@" > "$tmp/flag" 2>&1
    local rc=$?
    if [ $rc -ne "$EXIT_USAGE" ] || ! grep -qF -- "$want" "$tmp/flag"; then
        bad "$*: exit $rc, want $EXIT_USAGE and '$want'; got: $(head -c 300 "$tmp/flag")"
    fi
}
flag "mrcnn eval: --threads wants an integer in [1, 1024], got '100000'" "$M" eval --gt x.json --results y.json --threads 100000
flag "mrcnn eval: --threads wants an integer in [1, 1024], got '99999999999'" "$M" eval --gt x.json --results y.json --threads 99999999999
flag "mrcnn eval: --threads wants an integer in [1, 1024], got '0'" "$M" eval --gt x.json --results y.json --threads 0
flag "mrcnn predict: --score-thresh wants a number in [0, 1], got 'nan'" "$M" predict --config x --weights y --out z --score-thresh nan a.png
flag "mrcnn train: --max-steps wants an integer in [1, 2147483647], got '99999999999'" "$M" train --max-steps 99999999999
flag "mrcnn train: --comm-timeout wants a number in [0, 1e+07], got 'inf'" "$M" train --comm-timeout inf
echo "flags: out-of-range counts refused with exit 2"
# a directory given to predict as an image: named as one (before: "allocating
# 9223372036854775807 bytes"); the model's config and weights are not needed to say so
"$M" predict --config "$ROOT/configs/tiny.yaml" --weights "$tmp/none.h5" --out "$tmp/pred" "$tmp/cfgdir" > "$tmp/out" 2>&1
grep -qF "'$tmp/cfgdir' is a directory, not an image file" "$tmp/out" || bad "predict DIR: $(head -c 300 "$tmp/out")"
[ $fails -eq 0 ] && echo "PASS: config values and count flags are range-checked"
[ $fails -eq 0 ]
