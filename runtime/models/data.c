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

/* Used when the README and docs are not found (docs/runtime.md "Training text"). */
static const char builtin_text[] =
    "pipec is a compiler for pipeline-parallel training schedules. A researcher writes a "
    "pipe file that says how a model is cut into pipeline stages and, for every stage, "
    "the exact order of its forward, backward, weight-gradient, recompute and swap ops "
    "over the micro-batches of one training iteration. pipec checks it, transforms it, "
    "simulates it and generates one C program per rank that really trains the model.\n";

/* The pages of the default text under its folder, in this order. */
static const char *const doc_pages[] = {
    "README.md", "docs/language.md", "docs/runtime.md", "docs/model.md", "docs/semantics.md",
    "docs/cost-model.md", "docs/simulator.md", "docs/passes.md", "docs/architecture.md"};

int data_load_default(TextData *d, const char *dir, char *said, size_t n)
{
    size_t npages = sizeof doc_pages / sizeof doc_pages[0], found = 0, len = 0;
    unsigned char *text = NULL;
    for (size_t i = 0; dir && i < npages; i++) {
        size_t plen = strlen(dir) + strlen(doc_pages[i]) + 2;
        char *path = malloc(plen);
        if (!path)
            goto oom;
        snprintf(path, plen, "%s/%s", dir, doc_pages[i]);
        TextData page;
        int rc = data_load(&page, path);
        free(path);
        if (rc != 0) {
            if (errno == ENOMEM)
                goto oom;
            continue; /* a page that is not there */
        }
        unsigned char *t = realloc(text, len + page.n + 1);
        if (!t) {
            data_free(&page);
            goto oom;
        }
        text = t;
        if (page.n)
            memcpy(text + len, page.bytes, page.n);
        len += page.n;
        text[len++] = '\n';
        found++;
        data_free(&page);
    }
    if (len >= DATA_MIN_BYTES) {
        d->bytes = text;
        d->n = len;
        snprintf(said, n, "README.md and docs, %zu of %zu pages, %zu bytes, in %s", found,
                 npages, len, dir);
        return 0;
    }
    free(text);
    if (data_from_memory(d, builtin_text, sizeof builtin_text - 1) != 0)
        return -1;
    if (dir)
        snprintf(said, n, "the built-in text, %zu bytes (README.md and docs/ are not in %s)",
                 d->n, dir);
    else
        snprintf(said, n, "the built-in text, %zu bytes (the program names no pipec tree "
                 "holding README.md and docs/)", d->n);
    return 0;
oom:
    free(text);
    errno = ENOMEM;
    return -1;
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
