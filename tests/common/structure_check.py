#!/usr/bin/env python3
"""The code's structure as a check (README.md, "Architecture"), beside the module map.

Fails on:
  dead   an extern function defined in src/ or data_prep/ that nothing outside tests/ names
         (a call, a function pointer put in a table or a struct, a use in a macro body all
         count; a name used only by tests/ is dead code), unless it is a test hook;
  hook   a test hook (MRCNN_TEST_HOOK before its definition or a declaration of it, from
         src/include/mrcnn/test_hooks.h: a fault-injection or debugging hook, or an entry
         the tests or fuzz targets need that cannot move to tests/common) that code outside
         tests/ calls (drop the marker) or that nothing in tests/ names (remove it);
  order  a call against the module order: a file of module M naming a function defined in a
         module that M may not use (tests/common/module_map.py's ALLOWED), and every include
         against the map (module_map.py's own check, run here too);
  long   a function of src/ or data_prep/ over MAX_LINES lines, not counting the lines of
         brace-initialized tables inside it (argument-parsing tables are data, not code).

KNOWN lists today's violations. It may only shrink: an entry that no longer matches fails.

Usage: structure_check.py [--root DIR] [--inject-include FILE HEADER] [--inject-function FILE NAME]
                          [--inject-hook FILE NAME] [--inject-call FILE NAME] [--inject-long FILE LINES]
                          [--list]
  --inject-*  pretend FILE has one more include / an unused extern function NAME / the same
              marked MRCNN_TEST_HOOK / a function that calls NAME / a function LINES lines
              long (the self-test of tests/unit/test_structure_check.sh: each must fail)
  --list      print every function over MAX_LINES lines, every dead function, known or not,
              and every test hook
Exit 0 when the tree follows the rules, 1 otherwise."""
import bisect
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import module_map  # noqa: E402

MAX_LINES = 100

# Today's violations, each to be removed: ("test-only" | "dead" | "long", function) or
# ("call", file, function). An entry that matches nothing any more fails: delete it.
KNOWN = {
    # Empty: a function that only tests call is either a marked test hook (MRCNN_TEST_HOOK where
    # it is defined or declared) or lives in tests/common. Add nothing here.
}

SOURCE_EXTS = (".c", ".cu", ".h", ".cuh", ".inc", ".def")
# Folders whose definitions are checked, and folders whose names count as callers.
CHECKED = ("src", "data_prep")
CALLERS = ("src", "data_prep", "include/mrcnn", "bench")  # src/include/mrcnn is under src
TEST_DIRS = ("tests",)
NOT_DEAD = {"main"}
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "defined", "__attribute__",
            "_Static_assert", "static_assert", "__launch_bounds__", "alignof", "_Alignof", "decltype"}
# Definition-name macros: `void MRCNN_OP(relu_forward)(...)` defines mrcnn_relu_forward.
NAME_MACROS = re.compile(r"\b(?:MRCNN_OP|MRCNN_BM|RS)\s*\(\s*(\w+)\s*\)")
IDENT = re.compile(r"[A-Za-z_]\w*")
HOOK = re.compile(r"\bMRCNN_TEST_HOOK\b")
LEXEMES = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def strip(text):
    """Comments, strings and character literals blanked (newlines kept, so lines still count);
    preprocessor lines other than #define blanked; `extern "C" {` and `namespace x {` marked
    with a '@' in place of their brace, which does not nest."""
    def blank(m):
        t = m.group(0)
        if t[0] in "\"'":
            return t[0] + " " * (len(t) - 2) + t[-1]
        return re.sub(r"[^\n]", " ", t)

    lines = LEXEMES.sub(blank, text).split("\n")
    macro_uses, in_pre, is_define = [], False, False
    for k, line in enumerate(lines):
        if not in_pre:
            if not line.lstrip().startswith("#"):
                continue
            in_pre = True
            m = re.match(r"\s*#\s*define\s+\w+", line)
            is_define = m is not None
            if m:
                line = line[m.end():]  # the macro's name is not a use
        if is_define:
            macro_uses += [(t, k + 1) for t in IDENT.findall(line)]
        in_pre = lines[k].rstrip().endswith("\\")
        lines[k] = ""
    s = "\n".join(lines)
    s = re.sub(r'\bextern\s+"\s*"\s*\{', lambda m: " " * (len(m.group(0)) - 1) + "@", s)
    s = re.sub(r"\bnamespace\s*\w*\s*\{", lambda m: " " * (len(m.group(0)) - 1) + "@", s)
    s = NAME_MACROS.sub(lambda m: "mrcnn_" + m.group(1) + " " * (len(m.group(0)) - len(m.group(1)) - 6), s)
    return s, macro_uses


def match_close(s, i, o, c):
    """Index of the bracket closing s[i] == o."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == o:
            depth += 1
        elif s[j] == c:
            depth -= 1
            if depth == 0:
                return j
    return len(s) - 1


class Source:
    def __init__(self, path, text):
        self.path = path
        self.s, macro_uses = strip(text)
        self.newlines = [m.start() for m in re.finditer("\n", self.s)]
        self.body_spans = []
        self.defs = []   # (name, static, first line, last line, lines not counting tables)
        self.hooks = []  # (name, line): a definition or declaration marked MRCNN_TEST_HOOK
        self.uses = list(macro_uses)  # (name, line)
        self.parse()

    def line(self, i):
        return bisect.bisect_left(self.newlines, i) + 1

    def parse(self):
        s, depth, i, n = self.s, 0, 0, len(self.s)
        starts = [0]  # index after the last ';', '}' or '{' at depth 0: the start of a declaration
        defined_at, declared_at = set(), set()
        while i < n:
            c = s[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    starts.append(i + 1)
            elif c == ";" and depth == 0:
                starts.append(i + 1)
            elif depth == 0 and (c.isalpha() or c == "_") and (i == 0 or not (s[i - 1].isalnum() or s[i - 1] == "_")):
                m = IDENT.match(s, i)
                name, j = m.group(0), m.end()
                k = j
                while k < n and s[k] in " \t\n":
                    k += 1
                if k < n and s[k] == "(" and name not in KEYWORDS:
                    close = match_close(s, k, "(", ")")
                    e = close + 1
                    while e < n and (s[e] in " \t\n" or s.startswith("const", e)):
                        e += 5 if s.startswith("const", e) else 1
                    m2 = re.compile(r"(?:\s|__attribute__\s*\(\(.*?\)\))*").match(s, e)
                    e = m2.end()
                    head = s[starts[-1]:i]
                    if HOOK.search(head):
                        self.hooks.append((name, self.line(i)))
                    if e < n and s[e] == "{" and "=" not in head:
                        end = match_close(s, e, "{", "}")
                        body = s[e:end + 1]
                        first, last = self.line(i), self.line(end)
                        self.defs.append((name, bool(re.search(r"\bstatic\b", head)), first, last,
                                          last - first + 1 - table_lines(body)))
                        defined_at.add(i)
                        self.scan_uses(body, e)
                        depth = 0
                        starts.append(end + 1)
                        i = end + 1
                        continue
                    declared_at.add(i)
                    i = j
                    continue
                i = j
                continue
            i += 1
        # Every identifier that is neither a definition's nor a prototype's name is a use,
        # including those at file scope (initializers of tables of function pointers, macros).
        spans = sorted(self.body_spans)
        span_starts = [a for a, _ in spans]
        for m in IDENT.finditer(s):
            if m.start() in defined_at or m.start() in declared_at:
                continue
            k = bisect.bisect_right(span_starts, m.start()) - 1
            if k >= 0 and m.start() < spans[k][1]:
                continue  # inside a function body: counted by scan_uses
            self.uses.append((m.group(0), self.line(m.start())))

    def scan_uses(self, body, offset):
        self.body_spans.append((offset, offset + len(body)))
        for m in IDENT.finditer(body):
            self.uses.append((m.group(0), self.line(offset + m.start())))


def table_lines(body):
    """Lines of the brace-initialized tables (`= {` ... `}`) inside a function body."""
    count = 0
    for m in re.finditer(r"=\s*\{", body):
        b = m.end() - 1
        end = match_close(body, b, "{", "}")
        count += body.count("\n", b, end)
    return count


def walk(root, tops):
    for top in tops:
        base = os.path.join(root, top)
        if os.path.isfile(base):
            yield top
            continue
        for d, dirs, files in os.walk(base):
            dirs[:] = sorted(x for x in dirs if x not in ("build", ".git"))
            for f in sorted(files):
                if f.endswith(SOURCE_EXTS):
                    yield os.path.relpath(os.path.join(d, f), root)


def load(root, rel, extra):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        text = f.read()
    return Source(rel, text + extra.get(rel, ""))


def main(argv):
    root = os.environ.get("ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    inj_inc, extra, show = [], {}, False
    i = 0
    try:
        while i < len(argv):
            a = argv[i]
            if a == "--root":
                root = argv[i + 1]; i += 2
            elif a == "--inject-include":
                inj_inc += ["--inject", argv[i + 1], argv[i + 2]]; i += 3
            elif a == "--inject-function":
                extra[os.path.normpath(argv[i + 1])] = extra.get(os.path.normpath(argv[i + 1]), "") + \
                    "\nint %s(int x) {\n    return x + 1;\n}\n" % argv[i + 2]; i += 3
            elif a == "--inject-hook":
                extra[os.path.normpath(argv[i + 1])] = extra.get(os.path.normpath(argv[i + 1]), "") + \
                    "\nMRCNN_TEST_HOOK int %s(int x) {\n    return x + 1;\n}\n" % argv[i + 2]; i += 3
            elif a == "--inject-call":
                extra[os.path.normpath(argv[i + 1])] = extra.get(os.path.normpath(argv[i + 1]), "") + \
                    "\nstatic void structure_check_injected_caller(void) {\n    %s();\n}\n" % argv[i + 2]; i += 3
            elif a == "--inject-long":
                lines = int(argv[i + 2])
                extra[os.path.normpath(argv[i + 1])] = extra.get(os.path.normpath(argv[i + 1]), "") + \
                    "\nstatic int structure_check_injected_long(int x) {\n" + "    x += 1;\n" * (lines - 3) + \
                    "    return x;\n}\n"; i += 3
            elif a == "--list":
                show = True; i += 1
            else:
                print(__doc__); return 2
    except (IndexError, ValueError):
        print(__doc__); return 2
    root = os.path.abspath(root)
    errors = []

    # Includes: the module map's own check.
    rc = module_map.main(["--root", root] + inj_inc)
    if rc:
        errors.append("includes against the module map (above)")

    checked = [load(root, p, extra) for p in walk(root, CHECKED)]
    callers = {c.path: c for c in checked}
    for p in walk(root, CALLERS):
        if p not in callers:
            callers[p] = load(root, p, extra)
    tests = [load(root, p, extra) for p in walk(root, TEST_DIRS)]

    defs = {}  # name -> [(path, static, first, last, lines)]
    for c in checked:
        for name, static, first, last, lines in c.defs:
            defs.setdefault(name, []).append((c.path, static, first, last, lines))
    hooks = {}  # name -> "path:line" of its first marked definition or declaration
    for c in callers.values():
        for name, ln in c.hooks:
            hooks.setdefault(name, "%s:%d" % (c.path, ln))
    used = {}
    for c in callers.values():
        for name, ln in c.uses:
            used.setdefault(name, []).append((c.path, ln))
    # src/ops is compiled twice; the double build's name (MRCNN_OP(<op>) as _f64) is a use of the op.
    test_used = {name for t in tests for n, _ in t.uses for name in (n, n[:-4] if n.endswith("_f64") else n)}
    used_known = set()

    def report(key, msg):
        if key in KNOWN:
            used_known.add(key)
        else:
            errors.append(msg)

    # dead
    dead, hook_lines = [], []
    for name, ds in sorted(defs.items()):
        if name in NOT_DEAD or all(st for _, st, _, _, _ in ds):
            continue
        if name in hooks:
            hook_lines.append("%s: %s is a test hook" % (hooks[name], name))
            if name in used:
                p, ln = used[name][0]
                errors.append("%s: test hook %s is called by %s:%d: drop its MRCNN_TEST_HOOK marker"
                              % (hooks[name], name, p, ln))
            elif name not in test_used:
                errors.append("%s: test hook %s is named nowhere, not even in tests/: remove it" % (hooks[name], name))
            continue
        if name in used:
            continue
        path, _, first, _, _ = ds[0]
        why = "used only by tests/" if name in test_used else "named nowhere"
        dead.append("%s:%d: %s has no caller outside tests/ (%s)" % (path, first, name, why))
        report(("test-only" if name in test_used else "dead", name), "%s:%d: function %s has no caller outside tests/ (%s): remove it"
               % (path, first, name, why))

    # order: calls (names of extern functions) against the module map
    ext_mod = {}
    for name, ds in defs.items():
        mods = {module_map.module_of(p) for p, st, _, _, _ in ds if not st}
        if mods:
            ext_mod[name] = mods
    for c in sorted(callers.values(), key=lambda x: x.path):
        mod = module_map.module_of(c.path)
        if mod in (None, "?"):
            continue
        local = {name for name, st, _, _, _ in c.defs if st}
        seen = set()
        for name, ln in c.uses:
            if name not in ext_mod or name in local or name in seen:
                continue
            mods = ext_mod[name]
            if mod in mods or mods & module_map.ALLOWED.get(mod, set()):
                continue
            seen.add(name)
            tm = ", ".join(sorted(mods))
            report(("call", c.path, name), "%s:%d: calls %s (module %s), but module %s may use only: %s"
                   % (c.path, ln, name, tm, mod, ", ".join(sorted(module_map.ALLOWED.get(mod, ()))) or "nothing"))

    # long
    longs = []
    for c in checked:
        for name, st, first, last, lines in c.defs:
            if lines > MAX_LINES:
                longs.append("%s:%d: %s is %d lines" % (c.path, first, name, lines))
                report(("long", name), "%s:%d: function %s is %d lines (at most %d, tables not counted): split it"
                       % (c.path, first, name, lines, MAX_LINES))

    for key in sorted(set(KNOWN) - used_known):  # an emptied KNOWN literal is a dict
        errors.append("KNOWN entry %s matches nothing any more: delete it from KNOWN in %s"
                      % (key, os.path.relpath(os.path.abspath(__file__), root)))
    if show:
        for line in dead + longs + hook_lines:
            print("  " + line)
    for e in errors:
        print("FAIL: " + e)
    if not errors:
        print("ok: %d files, %d functions: no dead function, no call against the module map, none over %d lines"
              " (%d known exceptions, %d test hooks)" % (len(checked), sum(len(c.defs) for c in checked), MAX_LINES,
                                                      len(KNOWN), len(hook_lines)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
