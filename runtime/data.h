/* data.h - training text for the `mlp` workload: any file read as bytes, cut into
 * deterministic (B,T) batches of tokens and next-character targets.
 *
 * Legend: B = micro-batch size, T = sequence length, V = vocabulary size.
 *
 * Batch (iteration i, micro-batch mb) row b starts at a position drawn from a
 * counter-based hash of (seed, i, mb, b), so any rank, the reference trainer and a
 * later run see exactly the same tokens without sharing state. Thread-safe: a loaded
 * TextData is only read.
 */
#ifndef PIPEC_DATA_H
#define PIPEC_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct TextData {
    unsigned char *bytes;   /* (n) the text */
    size_t n;               /* length in bytes */
} TextData;

/* Reads a whole file. Returns 0, or -1 with errno set (cannot open or read, out of
 * memory); an empty file loads with n == 0 (data_batch then refuses it). */
int data_load(TextData *d, const char *path);
/* Copies n bytes from memory. Returns 0, or -1 when out of memory. */
int data_from_memory(TextData *d, const void *bytes, size_t n);
void data_free(TextData *d);

/* Whether the text is long enough for sequences of length T (n >= T + 1). */
int data_fits(const TextData *d, int T);

/* Fills tokens (B,T) and targets (B,T) for iteration iter and micro-batch mb:
 * row b is text[p .. p+T) and text[p+1 .. p+T+1) for a position p in 0..n-T-1 from
 * hash(seed, iter, mb, b). A byte c becomes token c when c < V, else c % V.
 * Returns 0, or -1 when the text is shorter than T + 1 bytes or B, T, V < 1. */
int data_batch(const TextData *d, uint64_t seed, int64_t iter, int mb, int B, int T, int V,
               int *tokens, int *targets);

#endif
