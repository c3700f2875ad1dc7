/* migration_refinement.c - the `migration_refinement` pass (Obscura §5.3).
 *
 * Rank s can have up to min(M - 1, 3(P - s - 1)) backward bubbles after migration, but
 * the time the adjusted ranks lose cannot recede below that of the last adjusted rank
 * k: its bubbles bound what the pipeline can hide. So an earlier adjusted rank s < k
 * needs no more migrated forwards than rank k has: its warm count becomes
 *
 *     W_s = min(M, max(P - s, W_k + (k - s), W_{s+1} + 1))      for adjusted s < k
 *
 * (never raised: the pass only takes back migrated forwards; P - s is the 1F1B count it
 * never goes below; the + (k - s) and W_{s+1} + 1 keep the one-forward lag between
 * neighbours that 1F1B has, without which every steady step would wait for a forward to
 * cross the adjusted ranks and its backward to come back, sched_util.h). Fewer forwards
 * ahead means fewer activations held in the warm-up: the memory the Strawman added
 * (Challenge 2) shrinks on ranks 0..k-1.
 *
 * Requires a 1F1B-family schedule. Nothing to do without adjusted ranks. Idempotent. */
#include "passes.h"
#include "sched_util.h"

int pass_migration_refinement(Diag *d, Pipeline *p, const PassCall *call)
{
    int32_t k = sched_last_adjusted(p);
    if (k < 0)
        return 0;
    SchedShape sh;
    if (sched_read(d, p, call, &sh))
        return 1;
    for (int32_t s = k - 1; s >= 0; s--) {
        if (!p->adjusted[s])
            continue;
        int64_t want = p->P - s;
        if ((int64_t)sh.warm[k] + (k - s) > want)
            want = (int64_t)sh.warm[k] + (k - s);
        if ((int64_t)sh.warm[s + 1] + 1 > want)
            want = (int64_t)sh.warm[s + 1] + 1;
        if (want > p->M)
            want = p->M;
        if (want < sh.warm[s])
            sh.warm[s] = (int32_t)want;
    }
    sched_write(p, &sh, call->loc);
    sched_free(&sh);
    return 0;
}
