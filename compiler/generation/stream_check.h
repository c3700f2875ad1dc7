/* stream_check.h - the stream plan (stream_plan.h) on the compiler's side: built from
 * the IR and the comm plan, written as DIR/streams.json by `pipec emit --backend cuda`,
 * and verified against the arena plan (docs/cuda.md "The stream plan" and "The
 * verifier"). */
#ifndef PIPEC_STREAM_CHECK_H
#define PIPEC_STREAM_CHECK_H

#include <stddef.h>

#include "arena_plan.h"
#include "comm.h"
#include "ir.h"
#include "model_shape.h"
#include "stream_plan.h"
#include "util.h"

/* The plan's input for p and its comm plan; owns its arrays (stream_in_free). */
typedef struct StreamInBuf {
    StreamIn in;
    SpOp **ops;
    uint32_t *nops;
    SpMsg *msgs;
} StreamInBuf;

void stream_in_build(StreamInBuf *b, const Pipeline *p, const CommPlan *cp);
void stream_in_free(StreamInBuf *b);

/* Appends streams.json: {"ranks": [{"rank": R, "ops": [{"i": I, "op": "SI1",
 * "stream": "h2d", "waits": [I, ...]}, ...]}, ...]} (waits: same-rank op indices whose
 * end this op's stream waits for, directly; order on one stream is implied). */
void stream_plan_json(StrBuf *out, const Pipeline *p, const StreamPlan *sp);

/* Checks a plan against the arena plan ap (full_swap) of the same op lists, with
 * happens-before = the waits, same-stream order, and for messages the send-after /
 * receive-before pairs:
 *   - every read of arena bytes happens after their last write, and every write after
 *     the last read and write of the bytes it overwrites;
 *   - every wait names an op listed earlier on the rank (a later one has no event yet);
 *   - every message's send waits for its producer (or an op after it) and its consumer
 *     waits for its receive.
 * Cross-rank paths are not used for arena bytes (conservative). Returns the number of
 * violations; the first is described in why (one line). */
int stream_plan_check(const Pipeline *p, const StreamIn *in, const StreamPlan *sp,
                      const ArenaPlan *ap, char *why, size_t why_n);

/* The plan and its verification against the arena plans the generated program uses, in
 * one call: builds the comm plan and stream plan of p and checks the stream plan against
 * the cost-model arena plan and, when that passes and the mlp workload runs p's model,
 * against the arena plan of the workload's real sizes (shape, p's model shape as the
 * command computed it: model_shape_of). Returns the verifier's count (why as above);
 * *json (when not NULL) receives streams.json. */
int stream_plan_verify(const Pipeline *p, const WorkloadShape *shape, StrBuf *json, char *why,
                       size_t why_n);

#endif
