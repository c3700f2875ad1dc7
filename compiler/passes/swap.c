/* swap.c - the `swap(lambda=.., beta=.., stages=..)` pass: Obscura's activation swapping
 * scheme (§6.1, Fig. 10, Eq. 1).
 *
 * Activations move to host memory a micro-batch at a time ("activation blocks"), in
 * three phases: eviction in the warm-up (SO after the forward), evict-one-load-one in
 * the steady phase (each steady forward evicts one block while the block the next
 * backward needs is loaded), and loading in the ending phase (SI only). On rank s with
 * warm count W_s (sched_util.h) and lambda_s blocks evicted in the warm-up, micro-batch
 * m is swapped iff
 *
 *     m mod W_s < lambda_s
 *
 * (the first lambda_s warm-up blocks; then each steady forward replaces, one for one,
 * the block its step's backward loads back, so lambda_s blocks stay on the host). SO(m)
 * is listed right after F(m) (in the warm-up after F(m + 1)); SI(m) one backward ahead
 * of B(m), which gives the load the window of a whole step, 3f + r in the paper's
 * terms; on a swapping rank R(i) goes ahead of its step's forward so it never waits for
 * that forward's SO (sched_util.h has the exact placement).
 *
 * lambda is the count of the last chosen rank k; rank s < k evicts lambda + (k - s)
 * ("stage s-1 evicts one block more than stage s", §6.2), capped at W_s - 1 (a rank
 * whose every block waits for a backward gains nothing from more). beta (default 1) is
 * the fraction of a block an SO moves: it becomes the rank's swap_fraction, so Eq. 1's
 * activation memory A_s = (mu_s - lambda_s) a + (1 - beta) lambda_s a is what the memory
 * walk sees (plus the one block a prefetched SI brings back early). lambda = 0 removes
 * the swaps of the chosen ranks.
 *
 * Ranks: `stages`, default the adjusted ranks. Requires a 1F1B-family schedule.
 * Idempotent: the swapped set is a closed form of (W_s, lambda, k). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "sched_util.h"
#include "util.h"

int pass_swap(Diag *d, Pipeline *p, const PassCall *call)
{
    int err = 0;
    int64_t lambda = 2;
    double beta = 1.0;
    pass_arg_int(d, call, "lambda", &lambda, &err);
    pass_arg_num(d, call, "beta", &beta, &err);
    if (err)
        return err;
    if (lambda < 0 || lambda > IR_MAX_MICROBATCHES) {
        diag_error(d, pass_arg_loc(call, "lambda"), DIAG_VALUE,
                   "lambda must be between 0 and %d (got %lld)", IR_MAX_MICROBATCHES,
                   (long long)lambda);
        return 1;
    }
    if (!(beta >= 0 && beta <= 1)) {
        diag_error(d, pass_arg_loc(call, "beta"), DIAG_VALUE, "beta must be in [0, 1] (got %g)", beta);
        return 1;
    }
    uint8_t *sel;
    SchedShape sh;
    if ((err = sched_begin(d, p, call, &sel, &sh)) != 0)
        return err;
    int32_t k = -1;
    for (int32_t s = 0; s < p->P; s++)
        if (sel[s])
            k = s;
    for (int32_t s = 0; s < p->P; s++) {
        if (!sel[s])
            continue;
        int64_t ls = lambda ? lambda + (k - s) : 0;
        if (ls > sh.warm[s] - 1)
            ls = sh.warm[s] - 1;
        uint8_t *swp = sh.swp + (size_t)s * p->M;
        for (int32_t m = 0; m < p->M; m++)
            swp[m] = (m % sh.warm[s]) < ls;
        if (ls > 0)
            sched_set_beta(p, s, beta);
    }
    sched_write(p, &sh, call->loc);
    sched_free(&sh);
    free(sel);
    return 0;
}
