#!/usr/bin/env bash
# A conversion is atomic: killed (SIGKILL) at any instant of its commit, the set in --out
# is exactly the previous one or exactly the new one, and the next conversion succeeds and
# leaves nothing else behind. MRCNN_PREP_KILL_AT=k makes mrcnn-prep coco SIGKILL itself
# right before the k-th file operation of its commit (flush, rename, removal), so every
# instant is tried, deterministically: k = 1, 2, ... until a run is not killed. Before,
# the commit removed the old index first and moved the shards over the old ones: a kill
# in between left no index and a mix of new and old shards (3 of 30 timed kills).
# Done for a new set with as many shards as the old one (its file names collide with the
# old set's; after each kill, the next conversion must clean up) and with fewer. "The
# same set" is checked by content: the whole set exported as COCO JSON (images,
# annotations, categories) and inspect --check (every checksum, the shards against their
# index). About 15 s, nearly all of it MPI start-up (~0.4 s a run).
set -u -o pipefail
. "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" json
# No orted for a singleton: each mrcnn-prep run starts ~0.3 s faster.
export OMPI_MCA_ess_singleton_isolated=1

"$PREP" shapes --out "$T/a" --train 5 --val 1 --size 48x64 --seed 1 > /dev/null || fail "shapes a"
"$PREP" shapes --out "$T/b" --train 4 --val 1 --size 48x64 --seed 2 > /dev/null || fail "shapes b"
convert() { # convert SRC OUT SHARDS
    "$PREP" coco --annotations "$T/$1/annotations/instances_train.json" --images "$T/$1/train" --out "$2" \
        --shards "$3" --name set
}
export_set() { "$PREP" export "$1/set-index.h5" --out "$2" > /dev/null 2>&1; }
convert a "$T/old" 3 > /dev/null 2>&1 || fail "converting the old set"
export_set "$T/old" "$T/old.json" || fail "exporting the old set"
for n in 3 2; do
    convert b "$T/new$n" "$n" > /dev/null 2>&1 || fail "converting the new set ($n shards)"
    export_set "$T/new$n" "$T/new$n.json" || fail "exporting the new set"
done
cmp -s "$T/old.json" "$T/new3.json" && fail "the old and the new set export the same JSON"

# files_ok DIR: DIR holds set-index.h5 and exactly the shard files it names, nothing else.
files_ok() {
    "$PREP" inspect "$1/set-index.h5" --check > "$T/chk" 2>&1 || return 1
    local named have
    named=$( (echo set-index.h5; awk '$1 == "check" && $3 == "ok" {print $2}' "$T/chk") | sort | tr '\n' ' ')
    have=$(ls -A "$1" | sort | tr '\n' ' ')
    [ "$named" = "$have" ] || { echo "     files: $have; the index names: $named"; return 1; }
}

for n in 3 2; do
    k=0 olds=0 news=0
    while :; do
        k=$((k + 1))
        [ $k -le 60 ] || fail "$n shards: the conversion was still killed at operation 60"
        rm -rf "$T/w"
        cp -a "$T/old" "$T/w"
        MRCNN_PREP_KILL_AT=$k convert b "$T/w" "$n" > "$T/log" 2>&1
        rc=$?
        [ $rc = 0 ] && break
        [ $rc = 137 ] || { cat "$T/log"; fail "$n shards, kill at operation $k: exit $rc, want 137 (SIGKILL)"; }
        "$PREP" inspect "$T/w/set-index.h5" --check > "$T/chk" 2>&1 ||
            { ls -A "$T/w"; cat "$T/chk"; fail "$n shards, killed at operation $k: the set in --out fails inspect --check"; }
        export_set "$T/w" "$T/w.json" || fail "$n shards, killed at operation $k: the set cannot be exported"
        if cmp -s "$T/w.json" "$T/old.json"; then
            olds=$((olds + 1))
        elif cmp -s "$T/w.json" "$T/new$n.json"; then
            news=$((news + 1))
        else
            fail "$n shards, killed at operation $k: the set is neither the old nor the new one"
        fi
        # What the killed run left is cleaned up by the next one (checked where the new
        # set's names collide with the old set's).
        [ $n = 3 ] || continue
        convert b "$T/w" "$n" > "$T/log" 2>&1 || { cat "$T/log"; fail "$n shards: converting again after a kill at $k"; }
        export_set "$T/w" "$T/w.json" && cmp -s "$T/w.json" "$T/new$n.json" ||
            fail "$n shards: the conversion after a kill at $k is not the new set"
        files_ok "$T/w" || fail "$n shards: after a kill at $k and a new conversion, other files are left in --out"
    done
    [ $olds -gt 0 ] && [ $news -gt 0 ] || fail "$n shards: $olds kills left the old set, $news the new: want both"
    export_set "$T/w" "$T/w.json" && cmp -s "$T/w.json" "$T/new$n.json" || fail "$n shards: the unkilled conversion is not the new set"
    files_ok "$T/w" || fail "$n shards: a re-conversion left other files in --out"
    echo "$n shards over 3: killed at each of $((k - 1)) operations: $olds times the old set, $news times the new one, never a mix"
done
echo "PASS: a conversion killed at any instant of its commit leaves the old or the new set"
