/* lint.c - see lint.h. */
#include "lint.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Virtual stages whose derived F and B take no time: the partition gave them no layer
 * that costs anything (more virtual stages than layers, or only the half-layers an
 * architecture lacks). Listed in one warning at the `partition` line (or the `model`
 * line when the partition is the default). Needs a model and a device (without a
 * device every time is 0). */
static int lint_empty(Diag *d, const Pipeline *p)
{
    if (!p->model || !p->device)
        return 0;
    StrBuf list = {0};
    int n = 0, PV = p->P * p->V;
    for (int32_t v = 0; v < PV; v++) {
        int32_t s, c;
        ir_owner(p, v, &s, &c);
        if (ir_cost(p, s, c, COST_F) > 0 || ir_cost(p, s, c, COST_B) > 0)
            continue;
        if (n < 8)
            sb_printf(&list, "%s%d (stage %d, chunk %d)", n ? ", " : "", v, s, c);
        n++;
    }
    if (n) {
        const Field *layers = field_find(p->model->fields, p->model->nfields, "layers");
        char lay[96] = "";
        if (layers && layers->val.kind == VAL_NUM)
            snprintf(lay, sizeof lay, " (%g layers for %d virtual stages)", layers->val.num, PV);
        Loc at = p->partition_set ? p->partition_loc : p->model->loc;
        diag_warning(d, at, WARN_EMPTY,
                     "%d of %d virtual stages get no layers that take time from model '%s'%s: "
                     "%s%s; their F and B take 0 ms",
                     n, PV, p->model->name, lay, list.s, n > 8 ? ", ..." : "");
    }
    sb_free(&list);
    return n ? 1 : 0;
}

/* Per (stage, chunk): which micro-batches have a W; warns when the unsplit backwards
 * are a non-empty minority. */
static int lint_split(Diag *d, const Pipeline *p)
{
    int nwarn = 0;
    uint8_t *has_w = xmalloc((size_t)p->M);
    for (int32_t s = 0; s < p->P; s++) {
        const StageOps *st = &p->stages[s];
        for (int32_t c = 0; c < p->V; c++) {
            memset(has_w, 0, (size_t)p->M);
            uint32_t nw = 0;
            for (uint32_t i = 0; i < st->n; i++) {
                const Op *o = &st->ops[i];
                if (o->kind == OP_W && o->chunk == (uint32_t)c && o->mb < (uint32_t)p->M &&
                    !has_w[o->mb]) {
                    has_w[o->mb] = 1;
                    nw++;
                }
            }
            uint32_t unsplit = (uint32_t)p->M - nw;
            if (nw == 0 || unsplit == 0 || unsplit >= nw)
                continue;
            /* The unsplit backwards: name up to four, point at the first. */
            StrBuf names = {0};
            const Op *first = NULL;
            uint32_t k = 0;
            for (uint32_t i = 0; i < st->n; i++) {
                const Op *o = &st->ops[i];
                if (o->kind != OP_B || o->chunk != (uint32_t)c || o->mb >= (uint32_t)p->M ||
                    has_w[o->mb])
                    continue;
                char b[48];
                if (k < 4)
                    sb_printf(&names, "%s%s", k ? ", " : "", op_name(b, sizeof b, OP_B, o->mb, o->chunk));
                first = first ? first : o;
                k++;
            }
            if (first) {
                char b[48];
                diag_set_op(d, "%s (stage %d, micro-batch %u)",
                            op_name(b, sizeof b, OP_B, first->mb, first->chunk), s, first->mb);
                diag_warning(d, first->loc, WARN_SPLIT,
                             "stage %d splits %u of its %d backwards%s with W but not %s%s: "
                             "those compute input and weight gradients together (a missing W?)",
                             s, nw, p->M, p->V > 1 ? " of this chunk" : "", names.s,
                             k > 4 ? ", ..." : "");
                diag_clear_op(d);
                nwarn++;
            }
            sb_free(&names);
        }
    }
    free(has_w);
    return nwarn;
}

int lint_pipeline(Diag *d, const Pipeline *p)
{
    return lint_empty(d, p) + lint_split(d, p);
}
