"""Checks a picture written by plot.h against the data it should show: NAME.png decodes
at the expected size, NAME.gp plots every data column of its CSV files (one `using X:J`
per column), and every plotted series' colour is in the picture (each has its own,
and its legend sample is drawn in it exactly), so a series dropped from the CSV, the
script or the picture fails.
  check(base, csvs, size, x_col=1, skip_cols=())  -> the (csv, column) pairs plotted"""
import re
import sys

from PIL import Image


def read_csv(path):
    """header (list), rows (list of lists of float or None); '#' lines skipped."""
    head, rows = None, []
    for line in open(path):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        f = line.split(",")
        if head is None:
            head = f
            continue
        rows.append([float(v) if v != "" else None for v in f] if head[0] != "rank" else f)
    return head, rows


def check(base, csvs, size, x_col=1, skip_cols=()):
    gp = open(base + ".gp").read()
    im = Image.open(base + ".png").convert("RGB")
    assert im.size == size, (base, im.size, size)
    px = {}
    for c in im.getdata():
        px[c] = px.get(c, 0) + 1
    # plot clauses: 'file' or '' (the previous file), using X:J, optional colour
    clause = re.compile(r"(?:plot|,)\s*(?:\\\n\s*)?('(?:[^']|'')*')\s+using\s+([^\s]+)(.*?)(?=,\s*\\\n|\n|$)")
    plotted, last = set(), None
    for m in clause.finditer(gp):
        f = m.group(1)[1:-1].replace("''", "'")
        f = last if f == "" else f
        last = f
        parts = m.group(2).split(":")
        ycol = int(re.findall(r"\d+", parts[1])[0]) if len(parts) > 1 else None
        color = re.search(r"lc rgb '(#[0-9a-f]{6})'", m.group(3))
        plotted.add((f, ycol))
        if color and "notitle" not in m.group(3):
            rgb = tuple(int(color.group(1)[i:i + 2], 16) for i in (1, 3, 5))
            n = px.get(rgb, 0)
            assert n >= 20, "%s: series %s:%s (colour %s) is not in the picture (%d pixels)" % (base, f, ycol,
                                                                                              color.group(1), n)
    for path in csvs:
        head, rows = read_csv(path)
        for j in range(len(head)):
            if j + 1 == x_col or head[j] in skip_cols:
                continue
            if all(r[j] is None for r in rows):
                continue  # nothing to draw
            assert (path, j + 1) in plotted, "%s: column %d (%s) of %s is not plotted; plotted: %s" % (
                base, j + 1, head[j], path, sorted(plotted))
    return plotted


if __name__ == "__main__":
    print(check(sys.argv[1], sys.argv[2:], None))
