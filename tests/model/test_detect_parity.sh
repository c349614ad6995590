#!/usr/bin/env bash
# Detection functions (anchors, box coder, IoU, matcher, NMS, RPN targets and proposals,
# ROI sampling, ROIAlign forward/backward, mask targets, postprocess, mask paste) against
# torchvision's own implementation on random inputs.
set -u
PROG=$BUILD/tests/model/prog_detect
[ -x "$PROG" ] || { echo "prog_detect not built: $PROG"; exit 1; }
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
"$PY_TORCH" -c "import torchvision" 2>/dev/null || skip torch "$PY_TORCH has no torchvision"
exec "$PY_TORCH" "$ROOT/tests/model/detect_parity.py" "$PROG"
