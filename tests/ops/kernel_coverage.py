#!/usr/bin/env python3
"""Every __global__ kernel of src/backend/cuda/*.cu and what runs it (tests/ops/test_kernel_coverage.sh).

A kernel is covered when a chain of references from a function that launches it
(`kernel<<<`) up through src/backend/cuda's functions reaches either
  - a function the CUDA backend installs as an entry (`be->nn.relu_forward = cu_relu_forward;`)
    whose entry is in include/mrcnn/backend_ops.def and has its op-table case
    (case_<table>_<name> in tests/ops/test_op_table.c or an .inc beside it), or
  - a function that a test program under tests/ calls by name (the CUDA helpers that no
    backend entry reaches, e.g. inference's RLE decode, checked by tests/cuda/*).
A reference is any use of a known function's name in another's body (a call, or the
name passed as a pointer). Prints one line per kernel with the chain; exits 1 naming
every kernel without one. Usage: kernel_coverage.py ROOT
"""
import glob
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
os.chdir(root)


def strip(text):
    """Comments and string/char literals blanked (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * max(0, j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


HEADER_FN = re.compile(r"(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?(?:noexcept\s*)?$", re.S)
TRANSPARENT = re.compile(r'(extern\s*"\s*"|namespace\b[^{]*)$', re.S)  # extern "C" { (string blanked), namespace {


def functions(path):
    """{name: (body text, line of its start)} of the functions defined in path."""
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    # preprocessor lines carry no bodies; blank them (keep newlines)
    text = re.sub(r"^[ \t]*#.*(?:\\\n.*)*", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.M)
    found, depth, start, i, n = {}, 0, 0, 0, len(text)
    while i < n:
        c = text[i]
        if c in ";}" and depth == 0:
            start = i + 1
        elif c == "{" and depth == 0:
            header = text[start:i].strip()
            if TRANSPARENT.search(header):
                start = i + 1  # the block's contents are at file level
                i += 1
                continue
            d, j = 1, i + 1
            while j < n and d:
                d += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            m = HEADER_FN.search(header)
            if m and m.group(1) not in ("if", "for", "while", "switch", "sizeof", "return"):
                found[m.group(1)] = (text[i:j], text.count("\n", 0, i) + 1)
            i, start = j, j
            continue
        i += 1
    return found


src = sorted(glob.glob("src/backend/cuda/*.cu") + glob.glob("src/backend/cuda/*.c") + glob.glob("src/backend/cuda/*.cuh") +
             glob.glob("src/backend/cuda/*.h"))
fns, where = {}, {}
for p in src:
    for name, (body, line) in functions(p).items():
        fns[name] = body
        where[name] = "%s:%d" % (p, line)

kernels = []
for p in sorted(glob.glob("src/backend/cuda/*.cu")):
    text = strip(open(p, encoding="utf-8").read())
    for m in re.finditer(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)\s*\(", text):
        kernels.append((m.group(1), "%s:%d" % (p, text.count("\n", 0, m.start()) + 1)))

ident = re.compile(r"\b[A-Za-z_]\w*\b")
callers = {}  # name -> set of functions whose bodies mention it
for f, body in fns.items():
    for name in set(ident.findall(body)):
        if name != f:
            callers.setdefault(name, set()).add(f)

# installed entries: be->table.entry = fn;
installed = {}
for p in src:
    for m in re.finditer(r"\bbe->(\w+)\.(\w+)\s*=\s*(\w+)\s*;", strip(open(p, encoding="utf-8").read())):
        installed.setdefault(m.group(3), []).append("%s.%s" % (m.group(1), m.group(2)))

listed = set()
for m in re.finditer(r"BE_OPR?\(\s*(\w+)\s*,\s*(\w+)", strip(open("include/mrcnn/backend_ops.def").read())):
    listed.add("%s.%s" % (m.group(1), m.group(2)))
case_src = "".join(open(p).read() for p in ["tests/ops/test_op_table.c"] + glob.glob("tests/ops/*.inc"))
cases = set("%s.%s" % (m.group(1), m.group(2)) for m in re.finditer(r"static void case_(%s)_(\w+)\s*\(" % "|".join(
    sorted({e.split(".")[0] for e in listed})), case_src))

tests = {}
for p in sorted(glob.glob("tests/*/*.c") + glob.glob("tests/*/*.inc")):
    for name in set(ident.findall(strip(open(p, encoding="utf-8", errors="replace").read()))):
        tests.setdefault(name, []).append(p)


def cover(kernel):
    """The shortest chain kernel <- ... <- an entry with its op-table case; failing that,
    the shortest to a function a test program calls."""
    launchers = [f for f, body in fns.items() if re.search(r"\b%s\s*(<[^<>]*>)?\s*<<<" % kernel, body)]
    for want_test in (0, 1):
        seen, frontier = set(launchers), [[f] for f in launchers]
        while frontier:
            nxt = []
            for chain in frontier:
                f = chain[-1]
                for e in installed.get(f, []):
                    if not want_test and e in listed and e in cases:
                        return chain, "be->%s, op-table case case_%s" % (e, e.replace(".", "_"))
                if want_test and f in tests and not f.startswith("k_"):
                    return chain, "called by %s" % ", ".join(tests[f])
                if f in installed:
                    continue  # an entry runs through the table: its one "caller" installs it
                for g in sorted(callers.get(f, ())):
                    if g not in seen:
                        seen.add(g)
                        nxt.append(chain + [g])
            frontier = nxt
    return launchers, None


missing = []
for k, loc in kernels:
    chain, by = cover(k)
    if by:
        print("%-26s %-34s <- %s <- %s" % (k, loc, " <- ".join(chain), by))
    else:
        missing.append(k)
        print("%-26s %-34s NO CASE (launched by %s)" % (k, loc, ", ".join(chain) or "nothing"))
print("%d kernels, %d covered, %d without a case" % (len(kernels), len(kernels) - len(missing), len(missing)))
if not kernels:
    print("FAIL: no __global__ kernel found in src/backend/cuda/*.cu")
    sys.exit(1)
if missing:
    print("FAIL: kernels that no op-table case or test launches: %s" % " ".join(missing))
    sys.exit(1)
