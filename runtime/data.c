/* data.c - training text for the `mlp` workload (see data.h).
 * Legend: B = micro-batch size, T = sequence length, V = vocabulary size. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int data_load(TextData *d, const char *path)
{
    d->bytes = NULL;
    d->n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    if (!buf)
        goto fail;
    for (;;) {
        if (n == cap) {
            unsigned char *nb = cap > ((size_t)-1) / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) {
                errno = ENOMEM;
                goto fail;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                if (!errno)
                    errno = EIO;
                goto fail;
            }
            break;
        }
    }
    fclose(f);
    d->bytes = buf;
    d->n = n;
    return 0;
fail:;
    int e = errno;
    free(buf);
    fclose(f);
    errno = e;
    return -1;
}

int data_from_memory(TextData *d, const void *bytes, size_t n)
{
    d->n = 0;
    d->bytes = malloc(n > 0 ? n : 1);
    if (!d->bytes)
        return -1;
    if (n > 0)
        memcpy(d->bytes, bytes, n);
    d->n = n;
    return 0;
}

void data_free(TextData *d)
{
    free(d->bytes);
    d->bytes = NULL;
    d->n = 0;
}

int data_fits(const TextData *d, int T)
{
    return T >= 1 && d->bytes != NULL && d->n >= (size_t)T + 1;
}

/* A counter-based hash of four words (splitmix64 finaliser, Steele et al. 2014): the
 * same (seed, iter, mb, row) always gives the same value, with no state to share. */
static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

int data_batch(const TextData *d, uint64_t seed, int64_t iter, int mb, int B, int T, int V,
               int *tokens, int *targets)
{
    if (B < 1 || T < 1 || V < 1 || !data_fits(d, T))
        return -1;
    uint64_t npos = (uint64_t)(d->n - (size_t)T);   /* starts 0 .. n-T-1 */
    for (int b = 0; b < B; b++) {
        uint64_t p = hash4(seed, (uint64_t)iter, (uint64_t)(uint32_t)mb, (uint64_t)b) % npos;
        const unsigned char *s = d->bytes + p;
        int *tok = tokens + (size_t)b * T, *tgt = targets + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            tok[t] = s[t] < V ? s[t] : s[t] % V;
            tgt[t] = s[t + 1] < V ? s[t + 1] : s[t + 1] % V;
        }
    }
    return 0;
}
