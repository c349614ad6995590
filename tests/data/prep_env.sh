# The common start of the data suite's scripts, sourced as
#   . "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" MODULES [PROGRAM...]
# MODULES: the Python modules the script needs from $PY_COCO ("pycocotools" or
# "pycocotools, PIL"; their absence is a skip [coco]). PROGRAMs: more test programs
# under $BUILD that must be built. Sets PREP, T (a temporary directory removed at exit),
# fail(), and the exit codes of tests/common/exit_codes.sh.
ROOT=${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BUILD=${BUILD:-build/release}
PREP=$ROOT/$BUILD/mrcnn-prep
for _p in "$PREP" "${@:2}"; do
    [ -x "$_p" ] || { echo "not built: $_p"; exit 1; }
done
. "$ROOT/tests/common/skip.sh"
$PY_COCO -c "import $1" 2>/dev/null || skip coco "$1 not importable by $PY_COCO"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Under ASan, the fast unwinder stops inside Open MPI and its leaks then escape
# tests/lsan.supp; full unwinding lets the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
. "$ROOT/tests/common/exit_codes.sh"
