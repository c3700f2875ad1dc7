/* mlp_layers.h - the layer functions of the `mlp` workload, llm.c style.
 *
 * Legend: N = rows (B*T tokens), C = channels in, OC = channels out, V = vocabulary.
 * Outputs come first, then caches, then inputs and weights; gradients are named d*.
 * "+=" marks functions that accumulate into their outputs, the rest overwrite them.
 * Matrix products use cblas_sgemm (row-major); everything else is plain C. No function
 * allocates or keeps state, so they may run on several threads at once.
 */
#ifndef PIPEC_MLP_LAYERS_H
#define PIPEC_MLP_LAYERS_H

#include <stddef.h>

/* out (N,C) = wte[inp[n]]; inp (N) token ids in 0..V-1, wte (V,C). */
void mlp_encoder_forward(float *out, const int *inp, const float *wte, int N, int C);
/* dwte (V,C) += dout (N,C) scattered by inp (N), rows in order n = 0..N-1. */
void mlp_encoder_backward(float *dwte, const float *dout, const int *inp, int N, int C);

/* Layer norm over the last axis (eps 1e-5): out (N,C) = (inp - mean) * rstd * weight +
 * bias; caches mean (N) and rstd (N) = 1/sqrt(var + eps) for the backward. */
void mlp_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C);
/* dinp (N,C) += the input gradient of layer norm for dout (N,C). */
void mlp_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                  const float *mean, const float *rstd,
                                  const float *weight, int N, int C);
/* dweight (C) += sum_n dout * xhat, dbias (C) += sum_n dout, rows in order. */
void mlp_layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *mean,
                                   const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC) (bias may be NULL). */
void mlp_matmul_forward(float *out, const float *inp, const float *weight,
                        const float *bias, int N, int C, int OC);
/* dinp (N,C) = dout (N,OC) @ weight (OC,C). */
void mlp_matmul_backward_input(float *dinp, const float *dout, const float *weight,
                               int N, int C, int OC);
/* dweight (OC,C) += dout^T @ inp (N,C); dbias (OC) += sum_n dout (may be NULL). */
void mlp_matmul_backward_weight(float *dweight, float *dbias, const float *dout,
                                const float *inp, int N, int C, int OC);

/* GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in section 2):
 * out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void mlp_gelu_forward(float *out, const float *inp, size_t n);
/* dinp (n) = GELU'(inp) * dout; dinp may alias inp or dout. */
void mlp_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out (n) = inp1 + inp2; out may alias either input. */
void mlp_residual_forward(float *out, const float *inp1, const float *inp2, size_t n);

/* probs (N,V) = softmax(logits (N,V)) per row; probs may alias logits. */
void mlp_softmax_forward(float *probs, const float *logits, int N, int V);
/* Returns the mean over rows of -log probs[n, targets[n]] (probs (N,V), targets (N)). */
float mlp_crossentropy_forward(const float *probs, const int *targets, int N, int V);
/* dlogits (N,V) = (probs - onehot(targets)) * dloss: the gradient of dloss * (sum of the
 * per-row cross-entropies) through the softmax; dlogits may alias probs. */
void mlp_crossentropy_softmax_backward(float *dlogits, const float *probs,
                                       const int *targets, float dloss, int N, int V);

#endif
