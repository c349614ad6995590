"""Compares our COCO evaluation with pycocotools' COCOeval on generated sets.
Usage: cocoeval_check.py BUILD_DIR DATA_DIR
For every results file and IoU type: the 12 stats (1e-6, and `mrcnn eval`'s summary
lines must equal pycocotools' printed ones), and the full precision / recall arrays
(exact), with 1 and 3 threads."""
import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval


def pycoco(gt_path, res_path, iou_type):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        gt = COCO(gt_path)
        dt = gt.loadRes(res_path)
        E = COCOeval(gt, dt, iou_type)
        E.evaluate()
        E.accumulate()
    buf2 = io.StringIO()
    with contextlib.redirect_stdout(buf2):
        E.summarize()
    return E, buf2.getvalue().splitlines()


def main():
    build, data = sys.argv[1], sys.argv[2]
    gt = os.path.join(data, 'gt.json')
    failures = 0
    cases = [('res_both.json', 'bbox'), ('res_both.json', 'segm'), ('res_segm.json', 'segm'),
             ('res_segm.json', 'bbox'), ('res_bbox.json', 'bbox'), ('res_bbox.json', 'segm')]
    for res, iou_type in cases:
        rp = os.path.join(data, res)
        E, lines = pycoco(gt, rp, iou_type)
        want = np.array(E.stats)
        for threads in (1, 3):
            arr = os.path.join(data, 'arrays_%s_%s_%d.txt' % (res, iou_type, threads))
            r = subprocess.run([os.path.join(build, 'tests/eval/prog_cocoeval'), gt, rp, iou_type, str(threads), arr],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print('FAIL %s %s: prog_cocoeval rc=%d %s' % (res, iou_type, r.returncode, r.stderr[-1000:]))
                failures += 1
                continue
            v = np.loadtxt(arr)
            stats, rest = v[:12], v[12:]
            prec = rest[:E.eval['precision'].size].reshape(E.eval['precision'].shape)
            rec = rest[E.eval['precision'].size:].reshape(E.eval['recall'].shape)
            dp = np.max(np.abs(prec - E.eval['precision']))
            dr = np.max(np.abs(rec - E.eval['recall']))
            ds = np.max(np.abs(stats - want))
            exact = (prec == E.eval['precision']).all() and (rec == E.eval['recall']).all() and (stats == want).all()
            ok = exact and ds <= 1e-6
            print('%s %-14s %-4s threads=%d: max|d| stats %.3g precision %.3g recall %.3g %s' %
                  ('ok  ' if ok else 'FAIL', res, iou_type, threads, ds, dp, dr, '(bit-identical)' if exact else ''))
            failures += not ok
        # the CLI: summary lines and --json stats
        sj = os.path.join(data, 'stats_%s_%s.json' % (res, iou_type))
        r = subprocess.run([os.path.join(build, 'mrcnn'), 'eval', '--gt', gt, '--results', rp, '--iou-type', iou_type,
                            '--json', sj, '--per-category', '--threads', '2'], capture_output=True, text=True)
        if r.returncode != 0:
            print('FAIL mrcnn eval %s %s: rc=%d %s' % (res, iou_type, r.returncode, r.stderr[-1000:]))
            failures += 1
            continue
        ours = [l for l in r.stdout.splitlines() if l.startswith(' Average')]
        got = np.array(json.load(open(sj))[iou_type]['stats'])
        ok = ours == lines and np.max(np.abs(got - want)) <= 1e-6
        if not ok:
            print('FAIL mrcnn eval %s %s summary/json differ:\n%s\n--- pycocotools:\n%s' %
                  (res, iou_type, '\n'.join(ours), '\n'.join(lines)))
        failures += not ok
        print('%s mrcnn eval %s %s: 12 summary lines identical, --json stats max|d| %.3g' %
              ('ok  ' if ok else 'FAIL', res, iou_type, np.max(np.abs(got - want))))
        if res == 'res_both.json' and iou_type == 'segm':
            print('\n'.join(lines))
    print('%d failures' % failures)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
