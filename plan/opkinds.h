/* opkinds.h - the op kinds as the running program knows them: the streams an op runs
 * on and, per runtime kind (PR_F .. PR_LW of runtime/piperun.h), its spelling and
 * stream. Plain C data with no IR: the compiler (compiler/ir/ir.h, compiler/ir/opsem.c) and
 * the runtime (runtime/core/core.h) both include it, and neither states these
 * facts again.
 *
 * The compiler's op table (compiler/ir/opsem.c op_sem[]) is the source of every op fact;
 * this file is its runtime-facing column: OP_KINDS (compiler/ir/ir.h) lists these kinds
 * first, in this order (opsem.c asserts it at build time), and the unit test
 * tests/unit/test_opsem.c checks that each row's stream is the op table's. An op kind
 * the runtime runs as another (RO runs as R: op_sem[].runs_as) has no row here. */
#ifndef PIPEC_PLAN_OPKINDS_H
#define PIPEC_PLAN_OPKINDS_H

/* The per-rank streams an op runs on (docs/spec.md "Dependencies"): compute, device to
 * host (a copy out), host to device (a copy in). */
typedef enum Stream { STREAM_COMPUTE, STREAM_D2H, STREAM_H2D, STREAM_N } Stream;

/* X(suffix, spelling, Stream): runtime/piperun.h's PR_* kinds are generated from these
 * rows (tools/mkkinds.sh, `make kinds`). */
#define PLAN_KINDS(X) \
    X(F, "F", STREAM_COMPUTE) \
    X(B, "B", STREAM_COMPUTE) \
    X(W, "W", STREAM_COMPUTE) \
    X(R, "R", STREAM_COMPUTE) \
    X(SO, "SO", STREAM_D2H) \
    X(SI, "SI", STREAM_H2D) \
    X(OG, "OG", STREAM_D2H) \
    X(LW, "LW", STREAM_H2D)

enum {
#define X(e, s, st) PLAN_K_##e,
    PLAN_KINDS(X)
#undef X
    PLAN_NKINDS
};

/* The stream a runtime kind runs on; STREAM_COMPUTE for a value out of range. */
static inline Stream plan_kind_stream(int kind)
{
    static const unsigned char st[PLAN_NKINDS] = {
#define X(e, s, stream) stream,
        PLAN_KINDS(X)
#undef X
    };
    return kind >= 0 && kind < PLAN_NKINDS ? (Stream)st[kind] : STREAM_COMPUTE;
}

/* "F", "B", ... for a runtime kind; "?" for a value out of range. */
static inline const char *plan_kind_name(int kind)
{
    static const char *const nm[PLAN_NKINDS] = {
#define X(e, s, stream) s,
        PLAN_KINDS(X)
#undef X
    };
    return kind >= 0 && kind < PLAN_NKINDS ? nm[kind] : "?";
}

#endif
