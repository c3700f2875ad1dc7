/* sched_ref.c - reference op orders for the stdlib schedule templates, written
 * independently of stdlib/schedules.pipe: a C port of the per-rank generator of
 * PyTorch's torch.distributed.pipelining (`_get_1f1b_rank_ops` and `_get_warmup_ops`
 * in schedules.py), which keeps a micro-batch counter per stage and a queue of
 * pending weight gradients instead of the templates' closed forms.
 *
 *     sched_ref NAME P M V      prints "S: OP OP ..." for every rank S
 *     sched_ref -               reads lines "KEY NAME P M V" and prints, for each,
 *                               "== KEY" and then its ranks as above (one process
 *                               for a whole grid: tests/t_schedules.sh)
 *
 * NAME: gpipe, onef1b, interleaved, eager1f1b, zbh1, and zb1p (PyTorch's interleaved
 * zero-bubble ScheduleInterleavedZeroBubble, for comparing this port with PyTorch's own
 * artifact zb1p_2rank_2stagep_compute.csv). Ops use pipec's spelling: F3, B3.1, W0;
 * virtual stage c*P + s is chunk c of rank s (looped placement).
 *
 * Warmup (forwards before the first backward) on rank s, as in PyTorch and in
 * Megatron-LM's forward_backward_pipelining_with_interleaving:
 *     (V - 1) * P + k * (P - 1 - s), capped at M * V,
 * with k = 2 for interleaved (V > 1) and eager1f1b, k = 1 for onef1b, zbh1 and zb1p.
 * The chunk of the i-th forward is (i / P) % V; of the i-th backward V-1-(i / P) % V. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void op(char kind, int mb, int chunk)
{
    if (chunk)
        printf(" %c%d.%d", kind, mb, chunk);
    else
        printf(" %c%d", kind, mb);
}

/* The port of _get_1f1b_rank_ops for rank s. fwd/bwd counters per chunk; backward
 * chunks are remembered in order so that W follows the same order (the weight queue). */
static void rank_ops(int P, int M, int V, int s, int factor, int zero_bubble)
{
    int total = M * V;
    int warm = (V - 1) * P + factor * (P - 1 - s);
    if (warm > total)
        warm = total;
    int steady = total - warm;            /* fwd_bwd_ops */
    int *fcnt = calloc((size_t)V, sizeof *fcnt);
    int *bcnt = calloc((size_t)V, sizeof *bcnt);
    int *wcnt = calloc((size_t)V, sizeof *wcnt);
    int *bq = malloc((size_t)total * sizeof *bq); /* chunk of each backward, in order */
    int nb = 0, nw = 0;
    int n1f1b = zero_bubble ? s : 0;      /* num_1f1b_microbatches = rank */
#define FWD(i) do { int c_ = ((i) / P) % V; op('F', fcnt[c_]++, c_); } while (0)
#define BWD(i) do { int c_ = V - 1 - (((i) - warm) / P) % V; op('B', bcnt[c_]++, c_); bq[nb++] = c_; } while (0)
#define WGT() do { int c_ = bq[nw++]; op('W', wcnt[c_]++, c_); } while (0)
    for (int i = 0; i < warm + steady + warm; i++) {
        if (i < warm) {
            FWD(i);
        } else if (i < warm + steady) {
            FWD(i);
            BWD(i);
            if (zero_bubble && i - warm >= n1f1b)
                WGT();
        } else {
            BWD(i);
            if (zero_bubble && i - warm >= n1f1b)
                WGT();
        }
    }
    while (zero_bubble && nw < nb)
        WGT();
#undef FWD
#undef BWD
#undef WGT
    free(fcnt);
    free(bcnt);
    free(wcnt);
    free(bq);
}

/* Prints every rank of NAME at (P, M, V); 2 after a message for bad arguments. */
static int schedule(const char *name, int P, int M, int V)
{
    if (P < 1 || M < 1 || V < 1) {
        fprintf(stderr, "sched_ref: P, M, V must be >= 1\n");
        return 2;
    }
    for (int s = 0; s < P; s++) {
        printf("%d:", s);
        if (strcmp(name, "gpipe") == 0) {
            for (int m = 0; m < M; m++)
                op('F', m, 0);
            for (int m = 0; m < M; m++)
                op('B', m, 0);
        } else if (strcmp(name, "onef1b") == 0 ||
                   (strcmp(name, "interleaved") == 0 && V == 1)) {
            rank_ops(P, M, 1, s, 1, 0);
        } else if (strcmp(name, "interleaved") == 0) {
            rank_ops(P, M, V, s, 2, 0);
        } else if (strcmp(name, "eager1f1b") == 0) {
            rank_ops(P, M, 1, s, 2, 0);
        } else if (strcmp(name, "zbh1") == 0) {
            rank_ops(P, M, 1, s, 1, 1);
        } else if (strcmp(name, "zb1p") == 0) {
            rank_ops(P, M, V, s, 1, 1);
        } else {
            fprintf(stderr, "sched_ref: unknown schedule %s\n", name);
            return 2;
        }
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "-") == 0) {
        char line[256], key[128], name[64];
        int P, M, V;
        while (fgets(line, sizeof line, stdin)) {
            if (sscanf(line, "%127s %63s %d %d %d", key, name, &P, &M, &V) != 5) {
                fprintf(stderr, "sched_ref: want \"KEY NAME P M V\", not: %s", line);
                return 2;
            }
            printf("== %s\n", key);
            int rc = schedule(name, P, M, V);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (argc != 5) {
        fprintf(stderr, "usage: sched_ref NAME P M V | sched_ref -\n");
        return 2;
    }
    return schedule(argv[1], atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
}
