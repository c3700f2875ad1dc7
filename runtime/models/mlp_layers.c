/* mlp_layers.c - layer functions of the `mlp` workload (see mlp_layers.h).
 * Legend: N = rows (B*T), C = channels, OC = output channels, V = vocabulary. */
#include "mlp_layers.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "tf_kernels.h"

void mlp_encoder_forward(float *out, const int *inp, const float *wte, int N, int C)
{
    /* out is (N,C), inp is (N), wte is (V,C) */
    for (int n = 0; n < N; n++) {
        assert(inp[n] >= 0);
        memcpy(out + (size_t)n * C, wte + (size_t)inp[n] * C, (size_t)C * sizeof *out);
    }
}

void mlp_encoder_backward(float *dwte, const float *dout, const int *inp, int N, int C)
{
    /* dwte is (V,C), dout is (N,C), inp is (N) */
    for (int n = 0; n < N; n++) {
        float *dw = dwte + (size_t)inp[n] * C;
        const float *d = dout + (size_t)n * C;
        for (int i = 0; i < C; i++)
            dw[i] += d[i];
    }
}

void mlp_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C)
{
    /* out, inp are (N,C); mean, rstd are (N); weight, bias are (C) */
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float mf, s;
        tf_norm_stats(x, C, 0, &mf, &s); /* the gpt/llama kernels' statistics, eps 1e-5 */
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++)
            o[i] = (x[i] - mf) * s * weight[i] + bias[i];
        mean[n] = mf;
        rstd[n] = s;
    }
}

void mlp_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                  const float *mean, const float *rstd,
                                  const float *weight, int N, int C)
{
    /* dinp, dout, inp are (N,C); mean, rstd are (N); weight is (C) */
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        const float *x = inp + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        /* two reductions: mean(dnorm) and mean(dnorm * norm) */
        double dnorm_mean = 0.0, dnorm_norm_mean = 0.0;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += (double)dnorm * norm;
        }
        float a = (float)(dnorm_mean / C), b = (float)(dnorm_norm_mean / C);
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dx[i] += (dnorm - a - norm * b) * s;
        }
    }
}

void mlp_layernorm_backward_weight(float *dweight, float *dbias, const float *dout,
                                   const float *inp, const float *mean,
                                   const float *rstd, int N, int C)
{
    /* dweight, dbias are (C); dout, inp are (N,C); mean, rstd are (N) */
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        const float *x = inp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        for (int i = 0; i < C; i++) {
            dweight[i] += d[i] * ((x[i] - m) * s);
            dbias[i] += d[i];
        }
    }
}

void mlp_matmul_forward(float *out, const float *inp, const float *weight,
                        const float *bias, int N, int C, int OC)
{
    /* out is (N,OC), inp is (N,C), weight is (OC,C), bias is (OC) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C,
                1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (bias)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
            for (int j = 0; j < OC; j++)
                o[j] += bias[j];
        }
}

void mlp_matmul_backward_input(float *dinp, const float *dout, const float *weight,
                               int N, int C, int OC)
{
    /* dinp is (N,C), dout is (N,OC), weight is (OC,C) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC,
                1.0f, dout, OC, weight, C, 0.0f, dinp, C);
}

void mlp_matmul_backward_weight(float *dweight, float *dbias, const float *dout,
                                const float *inp, int N, int C, int OC)
{
    /* dweight is (OC,C), dbias is (OC), dout is (N,OC), inp is (N,C) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N,
                1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias)
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
            for (int j = 0; j < OC; j++)
                dbias[j] += d[j];
        }
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

void mlp_gelu_forward(float *out, const float *inp, size_t n)
{
    /* out, inp are (n) */
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
    }
}

void mlp_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    /* dinp, inp, dout are (n) */
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float t = tanhf(GELU_SCALE * (x + cube));
        float sech2 = 1.0f - t * t;
        float grad = 0.5f * (1.0f + t)
                   + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

void mlp_residual_forward(float *out, const float *inp1, const float *inp2, size_t n)
{
    /* out, inp1, inp2 are (n) */
    for (size_t i = 0; i < n; i++)
        out[i] = inp1[i] + inp2[i];
}

void mlp_softmax_forward(float *probs, const float *logits, int N, int V)
{
    /* probs, logits are (N,V) */
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++)
            if (l[i] > maxv)
                maxv = l[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            p[i] = expf(l[i] - maxv);
            sum += p[i];
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++)
            p[i] *= inv;
    }
}

float mlp_crossentropy_forward(const float *probs, const int *targets, int N, int V)
{
    /* probs is (N,V), targets is (N) */
    double sum = 0.0;
    for (int n = 0; n < N; n++) {
        assert(targets[n] >= 0 && targets[n] < V);
        float p = probs[(size_t)n * V + targets[n]];
        sum += -log(p > 1e-30f ? (double)p : 1e-30);
    }
    return (float)(sum / N);
}

void mlp_crossentropy_softmax_backward(float *dlogits, const float *probs,
                                       const int *targets, float dloss, int N, int V)
{
    /* dlogits, probs are (N,V), targets is (N) */
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        int t = targets[n];
        assert(t >= 0 && t < V);
        for (int i = 0; i < V; i++)
            d[i] = (p[i] - (i == t ? 1.0f : 0.0f)) * dloss;
    }
}
