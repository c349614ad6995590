#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on the GPU host into .gpu-pack/pack.tar.xz, so that
# one carried folder fits the device tool's 64 MiB limit: the CUDA build's programs and
# libmrcnn_cuda.so, every shared library they load that the host lacks (Open MPI, HDF5,
# OpenBLAS at 36 MB alone, cmocka, ...), and the Open MPI bundle (.mpi, from
# ../shared/device/mpi-bundle.sh) when present. Left out: glibc, libstdc++/libgcc_s and the
# CUDA libraries (cudart, cuBLAS, cuDNN, NCCL), which the host has.
# usage (here, after `make -j2`): BUILD=build/release bash bench/gpu_pack.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
MPI_DIR=${MPI_DIR:-.mpi}
PACK=.gpu-pack
[ -f "$BUILD/libmrcnn_cuda.so" ] || { echo "gpu_pack: $BUILD/libmrcnn_cuda.so missing: build with CUDA first (make -j2)" >&2; exit 1; }

files=("$BUILD/libmrcnn_cuda.so")
for f in "$BUILD/mrcnn" "$BUILD/mrcnn-prep" "$BUILD"/bench/* "$BUILD"/tests/cuda/* "$BUILD/tests/mpi/prog_buckets" \
    "$BUILD/tests/train/test_step_trace" "$BUILD"/tests/*/test_op_table*; do
    [ -f "$f" ] && [ -x "$f" ] && files+=("$f")
done

rm -rf "$PACK"
mkdir -p "$PACK"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/lib"
# Shared libraries of every program, less what the GPU host provides.
for f in "${files[@]}"; do ldd "$f" 2>/dev/null || true; done | awk '/=>/ && $3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libresolv|libstdc\+\+|libgcc_s|libmvec)\.so' |
    grep -v -E '/usr/local/cuda|/libcuda\.so|/libnvidia|/libcudnn|/libcublas|/libcudart|/libnccl|/libmrcnn_cuda' |
    while read -r lib; do cp -L "$lib" "$STAGE/lib/$(basename "$lib")"; done
missing=$(for f in "${files[@]}"; do ldd "$f" 2>/dev/null; done | grep "not found" | sort -u || true)
[ -z "$missing" ] || { echo "gpu_pack: unresolved libraries here:"; echo "$missing"; exit 1; } >&2
# Layout of the pack: <BUILD>/... (the programs), lib/ (their libraries), .mpi/, BUILD.
for f in "${files[@]}"; do mkdir -p "$STAGE/$(dirname "$f")"; cp -a "$f" "$STAGE/$f"; done
echo "$BUILD" > "$STAGE/BUILD"
[ -d "$MPI_DIR" ] && cp -a "$MPI_DIR" "$STAGE/.mpi"
tar -C "$STAGE" -cf - . | xz -T2 -6 > "$PACK/pack.tar.xz.tmp"
mv "$PACK/pack.tar.xz.tmp" "$PACK/pack.tar.xz"
grep -qx '/.gpu-pack/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu-pack/' >> .git/info/exclude; }
grep -qx '/gpu-check-out/' .git/info/exclude 2>/dev/null || echo '/gpu-check-out/' >> .git/info/exclude
size=$(du -m "$PACK/pack.tar.xz" | cut -f1)
echo "gpu_pack: $PACK/pack.tar.xz ${size} MB (${#files[@]} programs, $(ls "$STAGE/lib" | wc -l) libraries$([ -d "$MPI_DIR" ] && echo ", $MPI_DIR"))"
echo "gpu_pack: libmrcnn_cuda.so is $(du -k "$BUILD/libmrcnn_cuda.so" | cut -f1) KB"
[ "$size" -lt 60 ] || { echo "gpu_pack: pack exceeds the 60 MB budget of a device call" >&2; exit 1; }
