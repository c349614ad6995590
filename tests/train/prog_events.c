/* Writes a TensorBoard event file and a loss-curve PNG through the C writers, for
 * test_tensorboard.sh to read back with TensorBoard's own reader:
 *   prog_events DIR   ->  DIR/events.out.tfevents.*, DIR/metrics.json, DIR/loss.png */
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
    char json[1100], png[1100];
    snprintf(json, sizeof json, "%s/metrics.json", argv[1]);
    snprintf(png, sizeof png, "%s/loss.png", argv[1]);
    int n = mrcnn_plot_metrics_json(json, png);
    printf("plotted %d points\n", n);
    return n == 50 ? 0 : 1;
}
