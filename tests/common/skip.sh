# Skipping, the same way in every test script (the C twin is test_skip() in
# test_util.h). Source it, then: skip CAP "reason". CAP names the missing capability
# (gpu, nccl, torch, coco, tensorboard). Exits 77 ("skip [CAP]: reason"), which the
# runner counts as skipped, unless CAP is listed in MRCNN_REQUIRE (comma-separated):
# then the missing capability is a failure, exit 1.
skip() {
    local cap=$1
    shift
    case ",${MRCNN_REQUIRE:-}," in
    *",$cap,"*) echo "FAIL [$cap] required by MRCNN_REQUIRE: $*"; exit 1 ;;
    esac
    echo "skip [$cap]: $*"
    exit 77
}
