/* Writes a TensorBoard event file through the C writer, for test_tensorboard.sh to
 * read back with TensorBoard's own reader (the pictures: test_plots.sh):
 *   prog_events DIR   ->  DIR/events.out.tfevents.*, DIR/metrics.json */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mrcnn/metrics.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: prog_events DIR\n");
        return 2;
    }
    /* CRC-32C check value (RFC 3720 / iSCSI): "123456789" -> 0xE3069283. */
    if (mrcnn_crc32c("123456789", 9) != 0xE3069283u) {
        fprintf(stderr, "crc32c(\"123456789\") = %08x, want e3069283\n", mrcnn_crc32c("123456789", 9));
        return 1;
    }
    mrcnn_metrics m;
    mrcnn_metrics_open(&m, argv[1], 1);
    static const char *const names[] = {"loss_rpn_cls", "loss_mask"};
    for (int step = 1; step <= 50; step++) {
        mrcnn_step_metrics s;
        memset(&s, 0, sizeof s);
        s.step = step;
        s.max_step = 50;
        s.n_losses = 2;
        s.loss_names = names;
        s.losses[0] = 1.0 / step;
        s.losses[1] = 0.5 + 0.25 * sin(step);
        s.total_loss = s.losses[0] + s.losses[1];
        s.lr = 0.01 * step;
        s.img_per_s = 10;
        s.loss_scale = 65536;
        mrcnn_metrics_log(&m, &s);
    }
    mrcnn_metrics_close(&m);
    return 0;
}
