/* actions.h - what PyTorch's pipelining runtime (_PipelineScheduleRuntime in
 * torch/distributed/pipelining) does with the runtime actions of a schedule (ActionKind
 * of ir.h), checked on one list of a schedule's compute and runtime actions in each
 * rank's order. One set of rules for the two places schedules with actions come from:
 * a PyTorch CSV (import-csv, csv.c) and a `.pipe` (check.c). docs/csv.md "The comms
 * form" and docs/semantics.md "Runtime actions" state the rules.
 *
 * Legend: S = virtual stages (PyTorch's stage indices), P = ranks. */
#ifndef PIPEC_ACTIONS_H
#define PIPEC_ACTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"

/* The kind of one item: a compute action, or SEQ_ACTION + ActionKind. SEQ_B is a
 * backward that produces input gradients (PyTorch's I, B or BW). */
enum { SEQ_F, SEQ_B, SEQ_W, SEQ_ACTION };

/* One compute or runtime action on a rank. 32 bytes. */
typedef struct SeqItem {
    uint32_t rank;
    uint32_t vstage;      /* virtual stage (PyTorch's stage index) */
    uint32_t mb;          /* micro-batch (0 for UNSHARD, RESHARD, REDUCE_GRAD, OVERLAP_F_B) */
    uint32_t kind;        /* SEQ_F, SEQ_B, SEQ_W or SEQ_ACTION + ActionKind */
    const char *spell;    /* a compute action's spelling in messages: "F", "I", "BW", ... */
    Loc loc;
} SeqItem;

/* How messages name things. csv: "2SEND_F0" and "rank"; else the `.pipe` spelling
 * "SEND_F0.1" (chunk[] of the virtual stage) and "stage". */
typedef struct SeqStyle {
    bool csv;
    const uint32_t *chunk;  /* [S] the chunk of each virtual stage (pipe style) */
} SeqStyle;

/* What pipec does with a runtime action of one kind (docs/csv.md "What pipec runs"):
 * the one place that says which actions pipec's simulator, memory walk and generated
 * programs do not execute as PyTorch's runtime does, and what pipec models instead.
 * actions_check warns once per such kind, at its first action, on a CSV (import-csv)
 * and on a `.pipe` (check, sim, ...) alike; when pipec learns to run a kind (an
 * overlapped F/B pair, a ZeRO-3 gather op), only its row changes. */
typedef struct ActionRun {
    const char *runs;    /* completes "pipec's simulation and generated programs ...";
                          * NULL: pipec models the action itself (SEND/RECV: the p2p time
                          * of a cross-rank dependency, the generated send and receive) */
    const char *instead; /* what pipec models in its place */
} ActionRun;

extern const ActionRun action_run[ACTION_N];

/* Checks items[0..n) (ranks contiguous, 0..P-1 in order, each in its listed order;
 * owner[S] the rank of each virtual stage) against the runtime's rules. Errors: a
 * SEND/RECV on a rank that does not hold its stage (`placement`), with no stage on the
 * other side or without its partner (`missing`), a RECV after the compute it feeds or a
 * SEND before the compute that produces it, the n-th RECV of a pair of ranks not the
 * n-th SEND (`order`), blocking sends that deadlock (`deadlock`); an OVERLAP_F_B not
 * followed by two compute actions (`syntax`). Warnings (`action`): a compute on a
 * stage between its RESHARD and the next UNSHARD (or before its first UNSHARD), an
 * UNSHARD of an unsharded stage, a RESHARD of a sharded one, a REDUCE_GRAD before the
 * stage's last backward; per kind with an action_run[].runs, one warning at its first
 * action. Returns the number of errors reported. */
int actions_check(Diag *d, const SeqItem *items, size_t n, uint32_t P, const uint32_t *owner,
                  uint32_t S, const SeqStyle *style);

/* actions_check on a pipeline's ops and p->actions, named in the `.pipe` spelling. */
int actions_check_pipeline(Diag *d, const Pipeline *p);

#endif
