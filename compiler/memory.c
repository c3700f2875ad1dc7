/* memory.c - see memory.h. (Being filled in.) */
#include "memory.h"

void mem_walk(const Pipeline *p, MemRank *out)
{
    for (int32_t s = 0; s < p->P; s++)
        out[s] = (MemRank){ir_cost(p, s, 0, COST_WEIGHTS), ir_cost(p, s, 0, COST_WEIGHTS),
                           UINT32_MAX, 0};
}

uint32_t mem_live_at(const Pipeline *p, int32_t s, uint32_t upto, double *held, uint32_t cap)
{
    (void)p, (void)s, (void)upto, (void)held, (void)cap;
    return 0;
}
