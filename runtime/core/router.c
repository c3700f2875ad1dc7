/* router.c - the message router (core.h PrIo): where the hidden state an F
 * hands on and the gradient a B hands back wait between their producing op, the
 * message that carries them and their consuming op. One rule for both directions and
 * both backends (host buffers here and in cpu.c, device buffers in
 * cuda/piperun_cuda.c): the output of op (v,m) goes to (v+1,m) forward and to (v-1,m)
 * backward; straight into that op's input when its virtual stage is on the same rank,
 * else to the send of the message (docs/runtime.md "Workloads"). */
#include <stdlib.h>

#include "core.h"

int pr_io_init(PrIo *io, size_t nvm)
{
    for (int d = 0; d < 2; d++) {
        io->in[d] = calloc(nvm ? nvm : 1, sizeof(void *));
        io->out[d] = calloc(nvm ? nvm : 1, sizeof(void *));
        if (!io->in[d] || !io->out[d])
            return -1;
    }
    io->n = nvm;
    return 0;
}

void pr_io_free(PrIo *io, void (*release)(void *buf))
{
    for (int d = 0; d < 2; d++) {
        for (size_t k = 0; io->in[d] && io->out[d] && k < io->n; k++) {
            if (io->in[d][k])
                release(io->in[d][k]);
            if (io->out[d][k])
                release(io->out[d][k]);
        }
        free(io->in[d]);
        free(io->out[d]);
        io->in[d] = io->out[d] = NULL;
    }
    io->n = 0;
}

void **pr_io_in(PrIo *io, const PrRun *run, int dir, int v, int m)
{
    return &io->in[dir][pr_vm(run, v, m)];
}

void **pr_io_next(PrIo *io, const PrRun *run, int rank, int dir, int v, int m)
{
    int next = dir == PR_FWD ? v + 1 : v - 1;
    return run->prog->vstages[next].rank == rank ? &io->in[dir][pr_vm(run, next, m)]
                                                 : &io->out[dir][pr_vm(run, v, m)];
}

void **pr_io_msg(PrIo *io, const PrRun *run, const PrMsg *m, bool send)
{
    if (m->payload != PR_PAY_ACT && m->payload != PR_PAY_GRAD)
        return NULL;
    int dir = m->payload == PR_PAY_ACT ? PR_FWD : PR_BWD;
    return send ? &io->out[dir][pr_vm(run, m->from_v, m->from_mb)]
                : &io->in[dir][pr_vm(run, m->to_v, m->to_mb)];
}

/* ---- host buffers: moved, not copied ----------------------------------------------------- */

/* Takes the buffer out of slot (NULL: none). */
static void *take(void **slot)
{
    void *buf = slot ? *slot : NULL;
    if (slot)
        *slot = NULL;
    return buf;
}

/* Puts buf into slot, freeing what an earlier iteration left there. */
static void put(void **slot, void *buf)
{
    free(*slot);
    *slot = buf;
}

void *pr_io_take(PrRank *r, int dir, int v, int m)
{
    return take(pr_io_in(&r->io, r->run, dir, v, m));
}

void pr_io_route(PrRank *r, int dir, int v, int m, void *buf)
{
    put(pr_io_next(&r->io, r->run, r->id, dir, v, m), buf);
}

void *pr_io_send(PrRank *r, const PrMsg *m)
{
    return take(pr_io_msg(&r->io, r->run, m, true));
}

void pr_io_recv(PrRank *r, const PrMsg *m, void *buf)
{
    if (buf)
        put(pr_io_msg(&r->io, r->run, m, false), buf);
}
