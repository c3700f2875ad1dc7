/* trace.c - the Chrome trace (Trace Event Format, "X" complete events) of what a run
 * really did, in the layout of `pipec sim --trace`: one process per stage (pid = rank,
 * named "stage K"), one thread per stream (tid 0 compute, 1 device-to-host, 2
 * host-to-device), one event per op and iteration, times in microseconds from the
 * start of the run. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>

#include "core.h"

int pr_trace_write(const PrRun *run, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    static const char *const streams[3] = {"compute", "d2h (swap out)", "h2d (swap in)"};
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    int first = 1;
    for (int s = 0; s < run->P; s++) {
        fprintf(f, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                   "\"args\": {\"name\": \"stage %d\"}}",
                first ? "" : ",\n", s, s);
        first = 0;
        for (int t = 0; t < 3; t++)
            fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                       "\"args\": {\"name\": \"%s\"}}",
                    s, t, streams[t]);
    }
    for (int s = 0; s < run->P; s++) {
        const PrRank *r = &run->rank[s];
        for (int it = 0; it < run->opt.iters; it++)
            for (uint32_t i = 0; i < r->d->nops; i++) {
                const PrOp *o = &r->d->ops[i];
                const PrSpan *sp = &r->span[(size_t)it * r->d->nops + i];
                if (sp->t1 <= 0 && sp->t0 <= 0)
                    continue;
                char nm[32];
                pr_op_name(nm, sizeof nm, o);
                int tid = (int)plan_kind_stream(o->kind);
                fprintf(f,
                        ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                        "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"mb\": %d, "
                        "\"chunk\": %d, \"vstage\": %d, \"iter\": %d}}",
                        nm, pr_kind_name(o->kind < PR_NKINDS ? o->kind : 0), s, tid, sp->t0 * 1e3,
                        (sp->t1 - sp->t0) * 1e3, o->mb, o->chunk, o->vstage, it + 1);
            }
    }
    fprintf(f, "\n]}\n");
    int err = ferror(f);
    if (fclose(f) != 0 || err) {
        errno = errno ? errno : EIO;
        return -1;
    }
    return 0;
}
