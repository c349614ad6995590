#!/usr/bin/env bash
# The installed headers stand alone: `make install` ships include/mrcnn/ only (the API a C
# program uses; src/include/mrcnn/ is internal), so each installed header must compile with
# nothing but the installed tree on the include path. A public header that includes an
# internal one fails here (and in the module map); so does a header the install rule misses.
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include/mrcnn"
# The install rule's header line, run into a scratch prefix (no build needed for headers).
line=$(grep -E '^\s*install -m 644 include/mrcnn/' "$ROOT/Makefile") || fail "no header install line in the Makefile"
(cd "$ROOT" && eval "${line//\$(PREFIX)/$tmp}") || fail "the install rule's header line failed"
n=0
for h in "$tmp"/include/mrcnn/*.h; do
    printf '#include "mrcnn/%s"\nint mrcnn_install_check_%d;\n' "$(basename "$h")" "$n" > "$tmp/one.c"
    ${CC:-mpicc} -std=c11 -D_GNU_SOURCE -fsyntax-only -I"$tmp/include" $(pkg-config --cflags hdf5-openmpi 2> /dev/null) \
        "$tmp/one.c" 2> "$tmp/err" || fail "installed $(basename "$h") does not compile alone: $(head -3 "$tmp/err")"
    n=$((n + 1))
done
[ "$n" -ge 20 ] || fail "only $n headers installed"
echo "ok: $n installed headers each compile with only the installed include/ on the path"
