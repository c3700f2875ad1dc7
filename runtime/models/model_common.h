/* model_common.h - what the model implementations (mlp.c, transformer.c) share, so that
 * neither writes it again: the byte sizes and cuts of a slice's layout region
 * (PR_LAYOUT_BYTES), the parameter memory, the generator of the initial weights, the
 * step and the loop of the sequential reference iteration. Header-only (static inline
 * and macros); valid C11 and C++ (nvcc reads it through transformer.h).
 *
 * The generator is splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom
 * number generators", OOPSLA 2014); the caller keeps its 64-bit state. */
#ifndef PIPEC_MODEL_COMMON_H
#define PIPEC_MODEL_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "region.h"

/* The byte sizes and cuts of a model's layout regions, defined once for every model
 * (mlp.c, transformer.c; declared by PR_LAYOUT_BYTES_DECL): PREFIX_act_bytes,
 * PREFIX_ckpt_bytes and PREFIX_wact_bytes (bytes) and PREFIX_region_cuts (from[], bytes)
 * of slice s (type S) of a model of config type C, over LAYOUT(c, s), the model's layout
 * of the slice: ckpt <= wact <= act floats, cut as pr_layout_region cuts it. */
#define PR_LAYOUT_BYTES(PREFIX, C, S, LAYOUT)                                              \
    size_t PREFIX##_act_bytes(const C *c, const S *s)                                     \
    {                                                                                      \
        return LAYOUT(c, s).act * sizeof(float);                                           \
    }                                                                                      \
    size_t PREFIX##_ckpt_bytes(const C *c, const S *s)                                    \
    {                                                                                      \
        return LAYOUT(c, s).ckpt * sizeof(float);                                          \
    }                                                                                      \
    size_t PREFIX##_wact_bytes(const C *c, const S *s)                                    \
    {                                                                                      \
        return LAYOUT(c, s).wact * sizeof(float);                                          \
    }                                                                                      \
    void PREFIX##_region_cuts(const C *c, const S *s, int64_t from[PR_PIECES + 1])         \
    {                                                                                      \
        int64_t ckpt = (int64_t)PREFIX##_ckpt_bytes(c, s);                                 \
        pr_region_cuts(ckpt, ckpt, (int64_t)PREFIX##_wact_bytes(c, s),                     \
                       (int64_t)PREFIX##_act_bytes(c, s), from);                           \
    }

/* The prototypes PR_LAYOUT_BYTES defines, for the model's header: act, ckpt and wact
 * bytes of the region of slice s (0 for an identity slice), and its piece boundaries in
 * bytes (region.h), what the arena plan cuts it at; the runtime checks them against the
 * program's. */
#define PR_LAYOUT_BYTES_DECL(PREFIX, C, S)                                                 \
    size_t PREFIX##_act_bytes(const C *c, const S *s);                                    \
    size_t PREFIX##_ckpt_bytes(const C *c, const S *s);                                   \
    size_t PREFIX##_wact_bytes(const C *c, const S *s);                                   \
    void PREFIX##_region_cuts(const C *c, const S *s, int64_t from[PR_PIECES + 1])

/* A model's parameter memory of n floats: *param uninitialised, *grad zeros (the model
 * carves its tensors out of both at the same offsets). Returns 0, or -1 when out of
 * memory (then pr_params_free of the two frees what was allocated). */
static inline int pr_params_alloc(size_t n, float **param, float **grad)
{
    *param = (float *)malloc(n * sizeof(float));
    *grad = (float *)calloc(n, sizeof(float));
    return *param && *grad ? 0 : -1;
}
static inline void pr_params_free(float *param, float *grad)
{
    free(param);
    free(grad);
}

/* The next 64 random bits; advances *state. */
static inline uint64_t pr_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1): the top 53 bits of pr_splitmix64 times 2^-53 (exact). */
static inline double pr_uniform01(uint64_t *state)
{
    return (double)(pr_splitmix64(state) >> 11) * 0x1.0p-53;
}

/* One micro-batch of a model's sequential reference: F over the whole model into act
 * (keeping everything), then B with gradients scaled by scale; returns the loss. */
typedef float (*PrReferenceStep)(void *model, void *act, const int *tokens,
                                 const int *targets, float scale);

/* Defines `static float NAME(void *model, void *act, const int *tokens, const int *targets,
 * float scale)`, the PrReferenceStep of a model of type T (mlp.c, transformer.c): over the
 * whole model (WHOLE(&m->cfg), a slice), FWD with keep_all into act, then BWD, the model's
 * backward with a gradient scale, over the whole region (REGION(act, &a), a the LAYOUT
 * of type LT of the slice); returns the loss. */
#define PR_REFERENCE_STEP(NAME, T, WHOLE, LT, LAYOUT, REGION, FWD, BWD)                     \
    static float NAME(void *model, void *act, const int *tok, const int *tgt, float scale) \
    {                                                                                      \
        T *m = model;                                                                      \
        MlpSlice s = WHOLE(&m->cfg);                                                       \
        LT a = LAYOUT(&m->cfg, &s);                                                        \
        float loss = 0.0f;                                                                 \
        FWD(m, &s, NULL, &loss, act, NULL, tok, tgt, true);                                \
        PrRegion g = REGION(act, &a);                                                      \
        BWD(m, &s, NULL, &g, NULL, tok, tgt, false, scale);                                \
        return loss;                                                                       \
    }

/* The sequential reference iteration of a model (mlp_reference_iteration,
 * tf_reference_iteration): step over each of the M micro-batches of tokens and targets
 * (bt tokens each), in a region of act_bytes, gradients scaled by 1/M; returns the mean
 * loss, NAN when out of memory. */
static inline float pr_reference_iteration(void *model, int M, size_t bt, size_t act_bytes,
                                           PrReferenceStep step, const int *tokens,
                                           const int *targets)
{
    void *act = malloc(act_bytes);
    if (!act)
        return NAN;
    double sum = 0.0;
    for (int k = 0; k < M; k++)
        sum += step(model, act, tokens + (size_t)k * bt, targets + (size_t)k * bt,
                    1.0f / (float)M);
    free(act);
    return (float)(sum / M);
}

#endif
