/* ast.c - the AST's arena, interned names and list helpers; see ast.h. The parser
 * itself is grammar/pipe.y (which also defines ast_parse). */
#include "ast.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

const char *const node_kind_name[N_NKINDS] = {
#define X(e, s) s,
    NODE_KINDS(X)
#undef X
};

/* Arena blocks: at least 64 KiB each, bigger for a bigger request. */
struct ArenaBlock {
    ArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_BLOCK = 64 * 1024 };

void ast_init(AstCtx *c)
{
    memset(c, 0, sizeof *c);
}

void ast_free(AstCtx *c)
{
    for (size_t i = 0; i < c->nruns; i++) /* the OPS nodes live in the blocks */
        free(c->runs[i]->u.run.ops);
    for (ArenaBlock *b = c->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(c->runs);
    free(c->itab);
    memset(c, 0, sizeof *c);
}

void *ast_alloc(AstCtx *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    ArenaBlock *b = c->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = xmalloc(sizeof *b + cap);
        b->used = 0;
        b->cap = cap;
        b->next = c->blocks;
        c->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return h;
}

/* An interned string: its length (string literals may contain NUL) and its bytes,
 * NUL-terminated. The table is open addressing with load factor <= 1/2. */
typedef struct Interned {
    size_t len;
    char s[];
} Interned;

static const Interned *entry(const char *s)
{
    return (const Interned *)(s - offsetof(Interned, s));
}

const char *ast_intern(AstCtx *c, const char *s, size_t n)
{
    if (c->icount * 2 >= c->icap) {
        size_t ncap = c->icap ? c->icap * 2 : 256;
        const char **nt = xcalloc(ncap, sizeof *nt);
        for (size_t i = 0; i < c->icap; i++) {
            const char *e = c->itab[i];
            if (!e)
                continue;
            size_t j = hash(e, entry(e)->len) & (ncap - 1);
            while (nt[j])
                j = (j + 1) & (ncap - 1);
            nt[j] = e;
        }
        free(c->itab);
        c->itab = nt;
        c->icap = ncap;
    }
    size_t j = hash(s, n) & (c->icap - 1);
    for (; c->itab[j]; j = (j + 1) & (c->icap - 1)) {
        const char *e = c->itab[j];
        if (entry(e)->len == n && memcmp(e, s, n) == 0)
            return e;
    }
    Interned *in = ast_alloc(c, sizeof *in + n + 1);
    in->len = n;
    memcpy(in->s, s, n);
    in->s[n] = 0;
    c->itab[j] = in->s;
    c->icount++;
    return in->s;
}

Node *ast_node(AstCtx *c, NodeKind k, Loc loc)
{
    Node *n = ast_alloc(c, sizeof *n);
    n->kind = (uint8_t)k;
    n->loc = loc;
    return n;
}

void ast_list_push(NodeList *l, Node *n)
{
    if (!n)
        return;
    if (l->tail)
        l->tail->next = n;
    else
        l->head = n;
    l->tail = n;
}

void ast_push_op(AstCtx *c, NodeList *l, AstOp op, uint32_t file)
{
    Node *run = l->tail;
    if (!run || run->kind != N_OPS || run->loc.file != file) {
        run = ast_node(c, N_OPS, (Loc){op.off, file});
        VEC_PUSH(c->runs, c->nruns, c->runcap, run);
        ast_list_push(l, run);
    }
    size_t cap = run->u.run.cap;
    VEC_RESERVE(run->u.run.ops, (size_t)run->nops + 1, cap);
    run->u.run.cap = (uint32_t)cap;
    run->u.run.ops[run->nops++] = op;
}

int ast_depth(const Node *a, const Node *b)
{
    int da = a ? a->depth : 0, db = b ? b->depth : 0;
    return (da > db ? da : db) + 1;
}
