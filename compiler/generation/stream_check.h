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

/* The verification of `emit --backend cuda`: checks the stream plan sp (over in) that
 * the program carries against the arena plans it carries, the synthetic workload's syn
 * and, when that passes and the model workload runs p's model, mlp (NULL: it does not):
 * the very plan objects the emitter writes (emit_c.h EmitPlans). Returns the number of
 * violations, the first described in why (as stream_plan_check). */
int stream_plan_verify(const Pipeline *p, const StreamIn *in, const StreamPlan *sp,
                       const ArenaPlan *syn, const ArenaPlan *mlp, char *why, size_t why_n);

#endif
