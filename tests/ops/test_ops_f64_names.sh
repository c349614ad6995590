#!/usr/bin/env bash
# src/ops compiles twice (src/ops/ops_real.h): the float objects define mrcnn_<op>, the
# double objects mrcnn_<op>_f64, each source naming its ops MRCNN_OP(<op>). Checks, on
# the built objects: every op declared in include/mrcnn/ops_decl.inc and roi_align.h is
# defined in both; the double objects define only _f64 names (a twice-compiled function
# written with its plain name would define the float name a second time), each with its
# float twin.
# Env: BUILD, ROOT (tests/run_tests.sh); BUILD=build/fuzz checks the fuzz build's objects.
set -u
fail() { echo "FAIL: $*"; exit 1; }
cd "$ROOT" || fail "no ROOT"
OBJ=$BUILD/obj/src/ops

f32_objs=() f64_objs=()
for src in src/ops/*.c; do
    b=$(basename "$src" .c)
    [ -f "$OBJ/$b.o" ] && [ -f "$OBJ/${b}_f64.o" ] || fail "$OBJ/$b.o or ${b}_f64.o not built"
    f32_objs+=("$OBJ/$b.o")
    f64_objs+=("$OBJ/${b}_f64.o")
done
# Functions and data with external linkage that the objects define.
defined() { nm -g --defined-only "$@" | awk 'NF == 3 && $2 ~ /^[TDBR]$/ {print $3}' | sort -u; }
f32=$(defined "${f32_objs[@]}")
f64=$(defined "${f64_objs[@]}")
[ -n "$f32" ] && [ -n "$f64" ] || fail "nm found no symbols in $OBJ"

bad=$(echo "$f64" | grep -v '_f64$')
[ -z "$bad" ] || fail "the double objects define float names (a definition or call without MRCNN_OP(...)?): $(echo $bad)"
for s in $f64; do
    echo "$f32" | grep -qx "${s%_f64}" || fail "$s has no float twin ${s%_f64}"
done

ops=$(grep -o 'MRCNN_OP([a-z0-9_]*)' include/mrcnn/ops_decl.inc | sed 's/MRCNN_OP(\(.*\))/mrcnn_\1/')
ops="$ops $(grep -o 'NAME([a-z]*)' include/mrcnn/roi_align.h | sed 's/NAME(\(.*\))/mrcnn_roi_align_\1/')"
n=0
for op in $ops; do
    echo "$f32" | grep -qx "$op" || fail "$op (declared) is not defined by the float objects"
    echo "$f64" | grep -qx "${op}_f64" || fail "${op}_f64 (declared) is not defined by the double objects"
    n=$((n + 1))
done
# 24 declared ops today: far fewer means the grep above broke
[ "$n" -ge 24 ] || fail "only $n ops found in the declarations"
echo "ok: $n declared ops in both builds; $(echo "$f64" | wc -l) double symbols, each the twin of a float one"
echo "float only: $(comm -23 <(echo "$f32") <(echo "$f64" | sed 's/_f64$//') | tr '\n' ' ')"
