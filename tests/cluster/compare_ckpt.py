"""Compares mrcnn checkpoints (HDF5) dataset by dataset, bit for bit.
usage: compare_ckpt.py SAME_A SAME_B [BEFORE]
Every dataset under /model and /optimizer of SAME_A must equal SAME_B's bit for bit;
with BEFORE (the weights before the step), SAME_A's /model must differ from it (the
update is not empty). Exits 1 naming the first difference."""
import sys
import h5py
import numpy as np


def datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.split("/")[0] in ("model", "optimizer"):
                out[name] = obj[()]
        f.visititems(visit)
    return out


a, b = datasets(sys.argv[1]), datasets(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit(f"FAIL: the checkpoints hold different datasets: {sorted(set(a) ^ set(b))[:5]}")
for k in sorted(a):
    if a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes():
        d = np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max()
        sys.exit(f"FAIL: {k} differs (max abs diff {d:.3e})")
print(f"{len(a)} datasets bit-identical")
if len(sys.argv) > 3:
    w0 = datasets(sys.argv[3])
    changed = sum(1 for k in a if k.startswith("model/") and a[k].tobytes() != w0[k].tobytes())
    total = sum(1 for k in a if k.startswith("model/"))
    if changed == 0:
        sys.exit("FAIL: the step changed no weight: the comparison would prove nothing")
    print(f"the first update changed {changed} of {total} weight tensors")
