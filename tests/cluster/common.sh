# Shared by tests/cluster/test_*.sh; sourced, never run (the runner runs test_*.sh only).
# Sets ROOT, BUILD (absolute), T (a temp dir on the shared file system), the two test
# hosts (tests/cluster/hosts.sh) and one trap that tears everything down, also when the
# test fails or is killed (TERM, INT, HUP; a SIGKILL leaves it to the fixture's janitor).
#   h1, h2                   the two hosts' names
#   on HOST CMD...           CMD on HOST, bounded by ON_TIMEOUT seconds (default 120)
#   mpirun_on HOSTSPEC NP CMD...  mpirun started on h1 with ranks on HOSTSPEC
#                            ("mrcnn-h1:1,mrcnn-h2:1"), remote ranks through the rsh agent,
#                            MPI over TCP on the veth subnet only
#   fail, ok, elapsed, cluster_cleanup_hook (a function the test may define)
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
BUILD=${BUILD:-build/release}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export ROOT BUILD
source "$ROOT/tests/common/exit_codes.sh"
source "$ROOT/tests/cluster/hosts.sh"
th_require
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
t_start=$(date +%s.%N)
elapsed() { awk -v a="${1:-$t_start}" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok ($(elapsed) s): $*"; }

T=$(mktemp -d /tmp/mrcnn-clustertest.XXXXXX)
cluster_cleanup() {
    local rc=$?
    trap '' TERM INT HUP
    declare -F cluster_cleanup_hook > /dev/null && cluster_cleanup_hook
    th_down
    if [ -n "${TH_LAST_DIR:-}" ] && ! th_check_clean; then
        echo "FAIL: the two-host fixture was not torn down cleanly"
        [ $rc -eq 0 ] && rc=1
    fi
    [ -n "${KEEP_T:-}" ] && echo "kept $T" || rm -rf "$T"
    echo "teardown done; test took $(elapsed) s"
    exit $rc
}
trap cluster_cleanup EXIT
trap 'echo "killed by a signal"; exit 143' TERM INT HUP

th_up || fail "the two test hosts did not come up"
# The janitor removes it too, should this shell be killed with SIGKILL (not when KEEP_T=1 keeps it).
[ -n "${KEEP_T:-}" ] || th_register_dir "$T"
h1=${TH_HOSTS[0]} h2=${TH_HOSTS[1]}
ON_TIMEOUT=${ON_TIMEOUT:-120}
on() { local h=$1; shift; th_exec "$h" timeout -k 5 "$ON_TIMEOUT" "$@"; }

# What matters for Open MPI across hosts: how remote daemons start (the rsh agent, ssh
# on a real cluster), which interfaces its out-of-band channel and the TCP BTL use, and
# the ob1 PML with the TCP BTL (no UCX without a fabric; shared memory only within a host).
MPI_HOST_ARGS=(--mca plm_rsh_agent "$ROOT/tests/cluster/rsh_agent.sh"
               --mca oob_tcp_if_include "$TH_NET" --mca btl_tcp_if_include "$TH_NET"
               --mca pml ob1 --mca btl self,vader,tcp --oversubscribe
               --mca oob_tcp_keepalive_time "${OOB_KEEPALIVE_TIME:-1}" --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 2
               -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_WAIT_POLICY -x TH_DIR)
mpirun_on() { local hosts=$1 np=$2; shift 2; on "$h1" mpirun --host "$hosts" -np "$np" "${MPI_HOST_ARGS[@]}" "$@"; }

# The shapes set converted to NSHARDS shards with one rank: $T/shards/train-index.h5, and
# val-index.h5 (4 images).
make_shards() { # nshards
    on "$h1" "$BUILD/mrcnn-prep" shapes --out "$T/raw" --train 8 --val 4 --size 128x128 > "$T/prep.log" 2>&1 &&
        on "$h1" "$BUILD/mrcnn-prep" coco --annotations "$T/raw/annotations/instances_train.json" --images "$T/raw/train" \
            --out "$T/shards" --name train --shards "$1" >> "$T/prep.log" 2>&1 &&
        on "$h1" "$BUILD/mrcnn-prep" coco --annotations "$T/raw/annotations/instances_val.json" --images "$T/raw/val" \
            --out "$T/shards" --name val --shards 1 >> "$T/prep.log" 2>&1 ||
        { cat "$T/prep.log"; fail "building the shards"; }
}
