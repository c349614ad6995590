/* Predicted data-parallel efficiency from a measured 1-GPU step timeline
 * (`mrcnn bench scaling --model`).
 *
 * The timeline (JSON, written from a GPU run) says when, counted from the start of
 * backward, each gradient bucket became ready and how many bytes it holds:
 *   {"source": "H200, R50-FPN, 8 img/GPU, bf16", "forward_ms": 38.0, "backward_ms": 62.0,
 *    "other_ms": 8.0, "images_per_gpu": 8,
 *    "buckets": [{"ready_ms": 9.5, "bytes": 26214400}, ...]}
 * forward_ms, backward_ms, other_ms (optimizer, loader wait, logging) make the 1-GPU step.
 *
 * Cost of one bucket on n GPUs (ring all-reduce: reduce-scatter + all-gather, 2(n-1)
 * steps, each moving bytes/n over the slowest link in the ring):
 *   c(n) = 2(n-1)/n * bytes / bw + 2(n-1) * latency
 * Buckets are reduced one after another on one communication stream, each starting when
 * it is ready and the previous one is done; what runs past the end of backward is
 * exposed, the rest is hidden behind the backward still running:
 *   end_i = max(ready_i, end_{i-1}) + c_i,  exposed = max(0, end_last - backward_ms)
 *   step(n) = forward + backward + exposed + other,  efficiency = step(1) / step(n)
 * (weak scaling: a fixed batch per GPU, so efficiency is per-GPU throughput relative to
 * one GPU). A ring that stays inside a node runs on the intra-node link (NVLink); one
 * that spans nodes is limited by each GPU's inter-node NIC (InfiniBand). Not modelled:
 * compute slowed by communication kernels, stragglers, tree algorithms, the loader. */
#ifndef MRCNN_SCALING_MODEL_H
#define MRCNN_SCALING_MODEL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mrcnn_link {
    char name[32];
    double bw_gbs;     // achieved all-reduce bus bandwidth per GPU, GB/s (1e9 bytes/s)
    double latency_us; // per ring step
} mrcnn_link;

/* "nvlink" (NVLink 4, H100/H200 SXM: 450 GB/s, 3 us), "ndr" (InfiniBand NDR 400 Gb/s per
 * GPU: 45 GB/s, 6 us), "hdr" (HDR 200 Gb/s: 22 GB/s, 6 us), "eth100" (100 GbE RoCE:
 * 11 GB/s, 10 us), or "BW,LAT" in GB/s and microseconds. Returns 0 (and says why in err)
 * when spec is neither. */
int mrcnn_link_parse(const char *spec, mrcnn_link *out, char *err, size_t errlen);

typedef struct mrcnn_timeline {
    char source[256];
    double forward_ms, backward_ms, other_ms;
    int images_per_gpu;
    int n_buckets;
    double *ready_ms; // (n_buckets) since backward started, nondecreasing, <= backward_ms
    double *bytes;    // (n_buckets)
} mrcnn_timeline;

/* Reads the JSON above. Returns 0 with a message naming the file and what is wrong. */
int mrcnn_timeline_load(const char *path, mrcnn_timeline *t, char *err, size_t errlen);
/* Same, from memory (tests). */
int mrcnn_timeline_parse(const char *json, size_t len, const char *name, mrcnn_timeline *t, char *err,
                         size_t errlen);
void mrcnn_timeline_free(mrcnn_timeline *t);

/* Ring all-reduce time of one buffer on n GPUs, in ms (0 for n = 1). */
double mrcnn_ring_allreduce_ms(double bytes, int n, const mrcnn_link *link);

typedef struct mrcnn_scaling_prediction {
    int gpus;
    const char *link;    // the link the ring ran on
    double step_ms;      // per step on gpus GPUs
    double comm_ms;      // sum of the buckets' all-reduce times
    double exposed_ms;   // communication left after backward ended
    double hidden_share; // 1 - exposed / comm (1 when there is no communication)
    double efficiency;   // step(1) / step(gpus)
    double img_per_s;    // all GPUs together
} mrcnn_scaling_prediction;

/* backward_scale stretches backward and the ready times (what-if: a slower backward). */
void mrcnn_scaling_predict(const mrcnn_timeline *t, int gpus, int gpus_per_node, const mrcnn_link *intra,
                           const mrcnn_link *inter, double backward_scale, mrcnn_scaling_prediction *out);

#ifdef __cplusplus
}
#endif
#endif
