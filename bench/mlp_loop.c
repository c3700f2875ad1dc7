/* mlp_loop.c - the baseline of bench/bench_runtime.sh: the mlp workload's kernels
 * (runtime/models/mlp.h: embedding, residual MLP blocks with layer norm and GELU, softmax head)
 * called by hand on one thread, in the order of the generated 1-rank 1F1B program
 * (F0 B0 F1 B1 ... F{M-1} B{M-1}), without the pipeline runtime: no rank thread, no
 * barrier, no op table, no arena bookkeeping, no messages. The batches are the ones the
 * runtime trains on (data_batch of the same text and seed); the act region of the one
 * micro-batch in flight is a single 64-aligned buffer.
 *
 *     cc -std=c11 -O2 -Iruntime -Iruntime/models -o mlp_loop bench/mlp_loop.c build/libpiperun.a \
 *        -lopenblas -lpthread -lm
 *     ./mlp_loop C L T B M V ITERS TEXT
 *
 * C hidden size, L blocks, T sequence length, B micro-batch size, M micro-batches, V
 * vocabulary, ITERS >= 1 iterations, TEXT the training text. The timed window of one
 * iteration is the one the runtime reports as iter_ms: the forward and backward of the
 * M micro-batches; zeroing the gradients and the SGD step (lr 0.05) happen outside it,
 * as they do in the runtime (its main thread, between barriers). Prints one line per
 * iteration, "iter I: time X ms", and "loss L" of the last iteration. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "data.h"
#include "mlp.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int arg(char **argv, int i, int lo)
{
    int v = atoi(argv[i]);
    if (v < lo) {
        fprintf(stderr, "mlp_loop: argument %d must be >= %d\n", i, lo);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 9) {
        fprintf(stderr, "usage: %s C L T B M V ITERS TEXT\n", argv[0]);
        return 2;
    }
    MlpConfig cfg = {.C = arg(argv, 1, 1), .L = arg(argv, 2, 0), .T = arg(argv, 3, 1),
                     .B = arg(argv, 4, 1), .M = arg(argv, 5, 1), .vocab = arg(argv, 6, 2)};
    int iters = arg(argv, 7, 1);
    char why[200];
    if (mlp_config_check(&cfg, why, sizeof why) != 0) {
        fprintf(stderr, "mlp_loop: %s\n", why);
        return 2;
    }
    TextData text;
    if (data_load(&text, argv[8]) != 0 || !data_fits(&text, cfg.T)) {
        fprintf(stderr, "mlp_loop: cannot use %s as training text\n", argv[8]);
        return 1;
    }
    openblas_set_num_threads(1); /* as the runtime does */
    MlpModel *m = mlp_create(&cfg, 1);
    MlpSlice s = mlp_whole(&cfg);
    size_t bt = (size_t)cfg.B * (size_t)cfg.T, act_bytes = mlp_act_bytes(&cfg, &s);
    void *act = aligned_alloc(64, (act_bytes + 63) / 64 * 64);
    int *tokens = malloc(bt * sizeof *tokens), *targets = malloc(bt * sizeof *targets);
    if (!m || !act || !tokens || !targets) {
        fprintf(stderr, "mlp_loop: out of memory\n");
        return 1;
    }
    double loss_sum = 0; /* summed in double, as the runtime sums its micro-batch losses */
    for (int it = 0; it < iters; it++) {
        mlp_zero_grad(m, &s);
        loss_sum = 0;
        double t0 = now_ms();
        for (int mb = 0; mb < cfg.M; mb++) {
            float loss = 0;
            if (data_batch(&text, 1, it, mb, cfg.B, cfg.T, cfg.vocab, tokens, targets) != 0 ||
                mlp_forward(m, &s, NULL, &loss, act, NULL, tokens, targets, true) != 0) {
                fprintf(stderr, "mlp_loop: forward failed\n");
                return 1;
            }
            mlp_backward(m, &s, NULL, act, NULL, tokens, targets, false);
            loss_sum += loss;
        }
        double t1 = now_ms();
        mlp_sgd_step(m, &s, 0.05f);
        printf("iter %d: time %.3f ms\n", it + 1, t1 - t0);
    }
    printf("loss %.4f\n", loss_sum / cfg.M);
    free(act);
    free(tokens);
    free(targets);
    mlp_free(m);
    data_free(&text);
    return 0;
}
