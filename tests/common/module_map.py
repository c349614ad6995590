#!/usr/bin/env python3
"""The module map (README.md, "Architecture") as a check.

Every `#include "..."` in src/**, data_prep/** and include/mrcnn/** is an edge from the
including file's module to the included file's module. An edge to a module that the map
does not let the includer use fails, naming file:line; so does a header of include/mrcnn/
that HEADERS below does not place in a module, a private header (src/<dir>/*.h) included from outside
its folder and the folders below it in the same module, and any cycle between modules.

Usage: module_map.py [--root DIR] [--inject FILE HEADER]... [--edges]
  --inject  pretend FILE has one more line `#include "HEADER"` (the self-test of
            tests/unit/test_module_map.sh: a wrong include must fail)
  --edges   print the module graph found (module -> modules it includes), then check
Exit 0 when the code follows the map, 1 otherwise."""
import os
import re
import sys

# Bottom to top. A module is a folder: src/<path>/ is module "<path>" (src/backend/cpu/ is
# "backend/cpu"), data_prep/ is "data_prep"; a folder not listed here belongs to the nearest
# listed folder above it (src/model/heads/ to model), and a file in none fails the check.
# A module may include its own headers and those of the modules listed.
ALLOWED = {
    "core": set(),                                             # tensor, check, log, rng, half, config, json, png, h5, arena, rle
    "ops": {"core"},                                           # CPU reference ops, float and double
    "ops/detect": {"core", "ops"},                             # host detection math: boxes, NMS, anchors, targets, paste
    "backend": {"core", "ops"},                                # backend interface, argument checks, trace layer, precision
    "backend/cpu": {"core", "ops", "ops/detect", "backend"},   # the CPU backend
    "backend/cuda": {"core", "ops", "ops/detect", "backend"},  # the CUDA backend (and its GPU=0 stand-in)
    "dist": {"core", "backend", "backend/cuda"},               # MPI, buckets, the NCCL glue (nccl/)
    "backend/open": {"core", "backend", "backend/cpu", "backend/cuda"},  # the choice of CPU or GPU backend
    "model": {"core", "ops", "ops/detect", "backend"},         # the network: parameters, layers, backbone, heads
    "data": {"core"},                                          # shards, decode, augment, loader
    "eval": {"core", "ops", "ops/detect", "backend", "backend/open", "model", "data", "dist"},  # COCO eval, inference, overlays
    "train": {"core", "ops", "ops/detect", "backend", "backend/open", "model", "dist", "data", "eval"},
    "cli": {"core", "ops", "ops/detect", "backend", "backend/open", "backend/cpu", "backend/cuda", "model", "dist",
            "data", "eval", "train"},
    "data_prep": {"core", "data"},
}

# include/mrcnn/<name> -> module. Complete: a header not listed here fails the check.
HEADERS = {
    "tensor.h": "core", "check.h": "core", "log.h": "core", "rng.h": "core", "half.h": "core",
    "config.h": "core", "json.h": "core", "png_write.h": "core", "h5_chunks.h": "core",
    "h5_errors.h": "core", "arena.h": "core", "rle.h": "core", "png_catch.h": "core", "args.h": "core", "ids.h": "core", "plot.h": "core", "fs.h": "core", "test_hooks.h": "core",
    "ops.h": "ops", "ops_decl.inc": "ops", "roi_align.h": "ops", "box_math.h": "ops",
    "roi_sample.inc": "ops",
    "anchors.h": "ops/detect", "boxes.h": "ops/detect", "postprocess.h": "ops/detect",
    "proposals.h": "ops/detect", "roi_targets.h": "ops/detect",
    "backend.h": "backend", "backend_ops.def": "backend", "backend_trace.h": "backend", "step_ctl.h": "backend",
    "precision.h": "backend", "detect_ops.h": "backend",
    "cuda_check.h": "backend/cuda",
    "backend_open.h": "backend/open",
    "model.h": "model", "params.h": "model", "layers.h": "model",
    "backbone.h": "model", "heads.h": "model", "checkpoint.h": "model",
    "dist.h": "dist", "scaling_model.h": "dist", "nccl_start.h": "dist",
    "data.h": "data", "train_feed.h": "data", "shard_schema.h": "data",
    "cocoeval.h": "eval", "eval_run.h": "eval", "infer.h": "eval", "overlay.h": "eval",
    "train.h": "train", "trainer.h": "train", "train_checkpoint.h": "train", "feed_source.h": "train", "metrics.h": "train", "model_trainable.h": "train", "run.h": "train", "step_profile.h": "train", "train_job.h": "train",
}

# Known violations, each (file, included header) with the issue that is to remove it.
# Empty is the goal; an entry that no longer matches anything fails, so the list shrinks.
ALLOWLIST = {
}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
EXTS = (".c", ".h", ".cu", ".cuh", ".inc")


def module_of(path):
    """Module of a repository-relative path, or None when it is outside the map."""
    parts = path.split("/")
    if parts[0] == "include" and len(parts) == 3 and parts[1] == "mrcnn":
        return HEADERS.get(parts[2], "?")
    if parts[:3] == ["src", "include", "mrcnn"] and len(parts) == 4:  # internal headers: not installed
        return HEADERS.get(parts[3], "?")
    if parts[0] == "src" and len(parts) >= 3:
        # The nearest folder that is a module: src/model/heads/ groups files of module model.
        for k in range(len(parts) - 1, 1, -1):
            if "/".join(parts[1:k]) in ALLOWED:
                return "/".join(parts[1:k])
        return "?"
    if parts[0] == "data_prep":
        return "data_prep"
    return None


def sources(root):
    for top in ("src", "data_prep", "include/mrcnn"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(EXTS):
                    yield os.path.relpath(os.path.join(d, f), root)


def resolve(root, src, inc):
    """Repository-relative path of `#include "inc"` in src (its folder first, then -Iinclude,
    then -Isrc/include)."""
    local = os.path.normpath(os.path.join(os.path.dirname(src), inc))
    if os.path.exists(os.path.join(root, local)):
        return local
    public = os.path.normpath(os.path.join("include", inc))
    internal = os.path.normpath(os.path.join("src", "include", inc))
    if not os.path.exists(os.path.join(root, public)) and os.path.exists(os.path.join(root, internal)):
        return internal
    return public


def find_cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv):
    root = os.environ.get("ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    inject, show = [], False
    i = 0
    while i < len(argv):
        if argv[i] == "--root":
            root = argv[i + 1]; i += 2
        elif argv[i] == "--inject":
            inject.append((argv[i + 1], argv[i + 2])); i += 3
        elif argv[i] == "--edges":
            show = True; i += 1
        else:
            print(__doc__); return 2
    root = os.path.abspath(root)
    errors = []
    # The map itself must be a DAG, or "bottom to top" means nothing.
    for cyc in find_cycles(ALLOWED):
        errors.append("the map allows a cycle: %s" % " <-> ".join(cyc))
    for m in set(HEADERS.values()):
        if m not in ALLOWED:
            errors.append("module_map.py: module '%s' has no ALLOWED entry" % m)
    graph, where, used_allow = {}, {}, set()
    for src in sources(root):
        mod = module_of(src)
        if mod == "?":
            errors.append("%s: in no module of the map (add it to HEADERS / ALLOWED in %s)" % (src, __file__))
            continue
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            lines = [(n, INCLUDE_RE.match(l)) for n, l in enumerate(f, 1)]
        incs = [(n, m.group(1)) for n, m in lines if m]
        incs += [(len(lines) + 1, h) for s, h in inject if os.path.normpath(s) == src]
        for n, inc in incs:
            target = resolve(root, src, inc)
            tmod = module_of(target)
            if tmod is None:
                continue  # tests/common, system-style quoted headers outside the tree
            if tmod == "?":
                errors.append("%s:%d: includes \"%s\", a header in no module of the map (add it to HEADERS in %s)"
                              % (src, n, inc, os.path.relpath(__file__, root)))
                continue
            if src.startswith("include/") and target.startswith("src/include/"):
                errors.append("%s:%d: includes \"%s\", an internal header (src/include/mrcnn): an installed header "
                              "may include only installed ones" % (src, n, inc))
                continue
            if not target.startswith(("include/", "src/include/")) and not (tmod == mod and (os.path.dirname(src) + "/").startswith(
                    os.path.dirname(target) + "/")):
                errors.append("%s:%d: includes \"%s\", a private header of %s/ (public headers live in include/mrcnn)"
                              % (src, n, inc, os.path.dirname(target)))
                continue
            if tmod == mod:
                continue
            graph.setdefault(mod, set()).add(tmod)
            where.setdefault((mod, tmod), "%s:%d" % (src, n))
            if tmod not in ALLOWED[mod]:
                if (src, inc) in ALLOWLIST:
                    used_allow.add((src, inc))
                    continue
                errors.append("%s:%d: includes \"%s\" (module %s), but module %s may use only: %s"
                              % (src, n, inc, tmod, mod, ", ".join(sorted(ALLOWED[mod])) or "nothing"))
    for key in sorted(set(ALLOWLIST) - used_allow):
        errors.append("ALLOWLIST entry %s -> %s matches nothing any more: remove it" % key)
    for cyc in find_cycles(graph):
        inner = ["%s -> %s (%s)" % (a, b, where[(a, b)]) for a in cyc for b in cyc if (a, b) in where]
        errors.append("cycle between modules %s: %s" % (" <-> ".join(cyc), "; ".join(inner)))
    if show:
        for m in sorted(graph):
            print("%-10s -> %s" % (m, ", ".join(sorted(graph[m]))))
    for e in errors:
        print("FAIL: " + e)
    if not errors:
        print("ok: %d modules, every include follows the map, no cycles" % len(ALLOWED))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
