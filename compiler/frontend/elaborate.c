/* elaborate.c - AST -> IR (ast.h -> ir.h): the one place where the syntax tree is
 * read. It
 *   1. collects the definitions of every loaded file (templates, models, devices),
 *   2. reads the pipeline's settings (stages, microbatches, chunks, memory, model,
 *      device, partition, tensor_parallel, recompute, apply) and sets the shape,
 *   3. reads the costs blocks, converting units to ms / bytes / bytes per second,
 *   4. runs the pipeline body and any `schedule` template as a small integer program
 *      (let, for, if, require, stage, ops, dep) that appends ops to the ranks' lists.
 * Structural `value` checks happen here (P, M, V >= 1, ranks, micro-batches and chunks
 * in range, non-negative costs); completeness (missing, duplicate, placement, order,
 * deadlock, memory) is check.c's. Expansion is bounded by frontend_limits (`limit`).
 * An error at one source location is reported once even when a loop reaches it many
 * times; after a limit error expansion stops. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "frontend.h"
#include "print.h"
#include "units.h"
#include "util.h"

/* Reported errors beyond which expansion stops (each location is reported once). */
enum { MAX_EXPAND_ERRORS = 100 };

typedef struct Var {
    const char *name;  /* interned */
    int64_t val;
    uint32_t prev;     /* the binding of the same name it shadows (index), or NO_VAR */
} Var;

#define NO_VAR UINT32_MAX

/* An open-addressing table from a pointer (an interned name, a root node) to a
 * uint32_t, so that a lookup costs one probe; cap is 0 or a power of two, and the
 * table doubles before it is half full. */
typedef struct PtrTab {
    const void **key;      /* NULL: an empty slot */
    uint32_t *val;
    size_t cap, n;
} PtrTab;

/* The constants every template and pipeline body sees, bound first and in this order:
 * P, M, V (the shape) and VSHAPE (1 with `chunks N vshape`, else 0). */
enum { NCONST = 4 };

typedef struct Elab {
    Diag *d;
    const Program *prog;
    Pipeline *p;
    /* Definitions of every file, by interned name. */
    Node **templates, **models, **devices;
    size_t ntemplates, nmodels, ndevices, tcap, mcap, dcap;
    /* The running program. */
    Var *vars;
    size_t nvars, varcap;
    /* The innermost binding of each name bound so far: an open-addressing table keyed
     * by the interned name, so that a lookup costs one probe instead of a walk down
     * the bindings (which was a third of a template's expansion). */
    PtrTab vtop;           /* name -> index into vars, or NO_VAR */
    /* Compiled expressions (expr_run): the flat code of every operator expression
     * evaluated so far, found by its root node in an open-addressing table. */
    struct Ins *code;
    size_t ncode, codecap;
    PtrTab cstart;         /* root node -> index into code of its first instruction */
    int64_t *stack;        /* expr_run's value stack */
    size_t stackcap;
    bool scoped;           /* no `let` has failed: every name an expression reads is
                            * bound at the same index of vars each time it runs */
    const char *sP, *sM, *sV, *sVSHAPE, *smin, *smax;
    const char *skind[OP_NKINDS]; /* op_kind_name[k], interned: an op call's kind by pointer */
    int32_t cur_stage;     /* -1 outside a stage block */
    uint64_t iterations;   /* loop iterations so far */
    uint64_t nops;         /* ops emitted so far */
    bool stop;             /* a limit was hit: expand nothing more */
    bool halt;             /* a `require` failed: leave the template (or body) running */
    const Node *schedule;  /* the `schedule NAME` being expanded, NULL in the body */
    int nexp_err;          /* errors reported while expanding */
    uint64_t *seen;        /* locations already reported (file << 32 | off), hashed */
    size_t seencap, nseen;
} Elab;

/* ---- reporting ------------------------------------------------------------------ */

/* True the first time loc is seen: an error inside a loop is reported once. */
static bool first_at(Elab *e, Loc loc)
{
    uint64_t key = ((uint64_t)loc.file << 32 | loc.off) + 1;
    if (e->nseen * 2 >= e->seencap) {
        size_t ncap = e->seencap ? e->seencap * 2 : 64;
        uint64_t *nt = xcalloc(ncap, sizeof *nt);
        for (size_t i = 0; i < e->seencap; i++)
            if (e->seen[i]) {
                size_t j = (size_t)(e->seen[i] * 0x9E3779B97F4A7C15u >> 20) & (ncap - 1);
                while (nt[j])
                    j = (j + 1) & (ncap - 1);
                nt[j] = e->seen[i];
            }
        free(e->seen);
        e->seen = nt;
        e->seencap = ncap;
    }
    size_t j = (size_t)(key * 0x9E3779B97F4A7C15u >> 20) & (e->seencap - 1);
    for (; e->seen[j]; j = (j + 1) & (e->seencap - 1))
        if (e->seen[j] == key)
            return false;
    e->seen[j] = key;
    e->nseen++;
    return true;
}

/* Whether an expansion error at loc is to be reported: the first one there (an error
 * inside a loop is reported once). Counts it, and stops expansion after too many. */
static bool exp_report(Elab *e, Loc loc)
{
    if (!first_at(e, loc))
        return false;
    if (++e->nexp_err >= MAX_EXPAND_ERRORS)
        e->stop = true;
    return true;
}

/* Reports an expansion error once per location; stops expansion after too many. */
#define EXP_ERROR(e, loc, code, ...)                                   \
    do {                                                               \
        if (exp_report((e), (loc)))                                    \
            diag_error((e)->d, (loc), (code), __VA_ARGS__);            \
    } while (0)

/* ---- numbers and units ---------------------------------------------------------- */

/* Converts a NUM node to the unit class `want` (a bare number is ms / bytes / bytes
 * per second / itself). `what` names the field in messages. */
static bool num_convert(Elab *e, const Node *n, UnitClass want, const char *what, double *out)
{
    const Num *x = &n->u.num;
    if (x->range_err) {
        diag_error(e->d, n->loc, DIAG_VALUE, "number out of range");
        return false;
    }
    double f = 1.0;
    if (x->unit) {
        UnitClass cls;
        if (!unit_lookup(x->unit, &cls, &f)) {
            char known[160];
            diag_error(e->d, n->loc, DIAG_VALUE, "unknown unit '%s' (%s)", x->unit,
                       unit_list(known, sizeof known));
            return false;
        }
        if (cls != want) {
            diag_error(e->d, n->loc, DIAG_VALUE, "%s takes %s, not %s", what,
                       unit_class_name(want), unit_class_name(cls));
            return false;
        }
    }
    double v = x->val * f;
    if (!isfinite(v)) {
        diag_error(e->d, n->loc, DIAG_VALUE, "number out of range");
        return false;
    }
    *out = v;
    return true;
}

/* A Value (model/device field, pass argument) from a value node. */
static bool make_value(Elab *e, const Node *n, Value *v)
{
    memset(v, 0, sizeof *v);
    v->loc = n->loc;
    switch ((NodeKind)n->kind) {
    case N_NUM: {
        v->kind = VAL_NUM;
        double f = 1.0;
        if (n->u.num.unit && !unit_lookup(n->u.num.unit, &v->unit, &f))
            return num_convert(e, n, UNIT_NONE, "", &v->num); /* reports the unit */
        v->num = n->u.num.val * f;
        if (n->u.num.range_err || !isfinite(v->num)) {
            diag_error(e->d, n->loc, DIAG_VALUE, "number out of range");
            return false;
        }
        return true;
    }
    case N_VIDENT:
        v->kind = VAL_IDENT;
        v->str = xstrdup(n->name);
        return true;
    case N_VSTR:
        v->kind = VAL_STRING;
        v->str = xstrdup(n->name);
        return true;
    case N_VRANGE: {
        const Num *lo = &n->a->u.num, *hi = &n->b->u.num;
        if (!lo->is_int || lo->unit || !hi->is_int || hi->unit) {
            diag_error(e->d, n->loc, DIAG_VALUE, "a range needs integer bounds");
            return false;
        }
        int64_t h = hi->ival;
        if (n->op == RANGE_INCLUSIVE) {
            if (h == INT64_MAX) {
                diag_error(e->d, n->loc, DIAG_VALUE, "number out of range");
                return false;
            }
            h++;
        }
        v->kind = VAL_RANGE;
        v->lo = lo->ival;
        v->hi = h;
        return true;
    }
    case N_VLIST: {
        v->kind = VAL_LIST;
        uint32_t cnt = 0;
        for (Node *x = n->body; x; x = x->next)
            cnt++;
        v->list = cnt ? xmalloc(cnt * sizeof *v->list) : NULL;
        for (Node *x = n->body; x; x = x->next) {
            Value item;
            if (!make_value(e, x, &item)) {
                value_free(v);
                return false;
            }
            v->list[v->nlist++] = item.num;
        }
        return true;
    }
    default:
        unreachable();
    }
}

static Field *make_fields(Elab *e, const Node *list, uint32_t *n, bool *ok)
{
    uint32_t cnt = 0;
    for (const Node *f = list; f; f = f->next)
        cnt++;
    Field *fs = cnt ? xcalloc(cnt, sizeof *fs) : NULL;
    *n = 0;
    for (const Node *f = list; f; f = f->next) {
        Field *x = &fs[*n];
        if (!make_value(e, f->a, &x->val)) {
            *ok = false;
            continue;
        }
        x->key = xstrdup(f->name);
        x->loc = f->loc;
        (*n)++;
    }
    return fs;
}

/* ---- the integer program -------------------------------------------------------- */

/* ---- pointer tables (PtrTab) ----------------------------------------------------- */

/* The slot of key k in t (cap > 0): its own, or the empty one where it would go. */
static inline size_t ptab_slot(const PtrTab *t, const void *k)
{
    size_t h = ((uintptr_t)k >> 3) * 0x9E3779B97F4A7C15u;
    for (size_t i = h >> 20 & (t->cap - 1);; i = (i + 1) & (t->cap - 1))
        if (!t->key[i] || t->key[i] == k)
            return i;
}

/* The value of k in t into *out; false where k is not in t. */
static inline bool ptab_get(const PtrTab *t, const void *k, uint32_t *out)
{
    if (!t->cap)
        return false;
    size_t i = ptab_slot(t, k);
    if (!t->key[i])
        return false;
    *out = t->val[i];
    return true;
}

/* The value of k in t, added as `fresh` where k is not in t yet; the pointer is valid
 * until the next ptab_put. */
static uint32_t *ptab_put(PtrTab *t, const void *k, uint32_t fresh)
{
    if (2 * (t->n + 1) > t->cap) { /* grow: rehash the keys */
        PtrTab old = *t;
        t->cap = old.cap ? 2 * old.cap : 64;
        t->key = xcalloc(t->cap, sizeof *t->key);
        t->val = xmalloc(t->cap * sizeof *t->val);
        for (size_t i = 0; i < old.cap; i++)
            if (old.key[i]) {
                size_t j = ptab_slot(t, old.key[i]);
                t->key[j] = old.key[i];
                t->val[j] = old.val[i];
            }
        free(old.key);
        free(old.val);
    }
    size_t i = ptab_slot(t, k);
    if (!t->key[i]) {
        t->key[i] = k;
        t->val[i] = fresh;
        t->n++;
    }
    return &t->val[i];
}

static void ptab_free(PtrTab *t)
{
    free(t->key);
    free(t->val);
}

static bool lookup_var(Elab *e, const char *name, int64_t *out)
{
    uint32_t top;
    if (!ptab_get(&e->vtop, name, &top) || top == NO_VAR)
        return false;
    *out = e->vars[top].val;
    return true;
}

static void bind(Elab *e, const char *name, int64_t val)
{
    uint32_t *top = ptab_put(&e->vtop, name, NO_VAR);
    if (e->nvars >= NO_VAR)
        die("too many bindings");
    VEC_PUSH(e->vars, e->nvars, e->varcap, ((Var){name, val, *top}));
    *top = (uint32_t)(e->nvars - 1);
}

/* Drops the bindings from mark on, uncovering what they shadowed. */
static void unbind_to(Elab *e, size_t mark)
{
    while (e->nvars > mark) {
        const Var *v = &e->vars[--e->nvars];
        e->vtop.val[ptab_slot(&e->vtop, v->name)] = v->prev;
    }
}

static bool eval(Elab *e, const Node *n, int64_t *out);

#define COLD_NOINLINE __attribute__((cold, noinline))

/* The error paths of eval, out of line so that its hot path stays small. */
static COLD_NOINLINE bool eval_num_error(Elab *e, const Node *n)
{
    if (n->u.num.range_err)
        EXP_ERROR(e, n->loc, DIAG_VALUE, "integer out of range (the largest is %" PRId64 ")",
                  INT64_MAX);
    else
        EXP_ERROR(e, n->loc, DIAG_VALUE, "expected an integer, not %g%s", n->u.num.val,
                  n->u.num.unit ? n->u.num.unit : "");
    return false;
}

static COLD_NOINLINE bool eval_name_error(Elab *e, const Node *n)
{
    const char **names = xmalloc((e->nvars + 1) * sizeof *names);
    for (size_t i = 0; i < e->nvars; i++)
        names[i] = e->vars[i].name;
    char hint[96];
    EXP_ERROR(e, n->loc, DIAG_NAME, "unknown name '%s'%s", n->name,
              diag_suggest(hint, sizeof hint, n->name, names, e->nvars));
    free(names);
    return false;
}

/* An integer literal or a bound name, evaluated in place (the leaves are half of the
 * nodes evaluated); anything else, or an error, goes through eval. */
static inline bool eval_leaf(Elab *e, const Node *n, int64_t *out)
{
    if (n->kind == N_NUM && n->u.num.is_int && !n->u.num.unit && !n->u.num.range_err) {
        *out = n->u.num.ival;
        return true;
    }
    if (n->kind == N_VAR && lookup_var(e, n->name, out))
        return true;
    return eval(e, n, out);
}

static COLD_NOINLINE bool eval_binop_error(Elab *e, const Node *n, int64_t a, int64_t b)
{
    if ((n->op == BIN_DIV || n->op == BIN_MOD) && b == 0) {
        EXP_ERROR(e, n->loc, DIAG_VALUE, "%s by zero", n->op == BIN_DIV ? "division" : "modulo");
        return false;
    }
    static const char ops[][3] = {"+", "-", "*", "/", "%"};
    EXP_ERROR(e, n->loc, DIAG_VALUE, "integer overflow in %" PRId64 " %s %" PRId64, a,
              ops[n->op], b);
    return false;
}

static COLD_NOINLINE bool eval_call_error(Elab *e, const Node *n)
{
    static const char *const fns[] = {"min", "max"};
    char hint[96];
    EXP_ERROR(e, n->loc, DIAG_NAME, "unknown function '%s' (functions: min, max)%s", n->name,
              diag_suggest(hint, sizeof hint, n->name, fns, 2));
    return false;
}

static COLD_NOINLINE bool eval_neg_error(Elab *e, const Node *n, int64_t a)
{
    EXP_ERROR(e, n->loc, DIAG_VALUE, "integer overflow in -(%" PRId64 ")", a);
    return false;
}

/* ---- compiled expressions ------------------------------------------------------- */

/* An operator expression runs as flat code over a value stack, compiled when it is
 * first evaluated: each node one instruction, in the order the tree walk would
 * evaluate them (operands left to right, then the operator), `&&` and `||` jumping
 * over their right operand, a name read from its binding's index in vars. The tree
 * walk cost about 40 instructions a node; a template's op calls evaluate about 16
 * nodes an op. Errors are reported at the same node, with the same message, and stop
 * the evaluation at the same point. */
typedef enum InsOp {
    I_CONST,   /* push v */
    I_VAR,     /* push the value of a's name (Opnd) */
    I_NEG,     /* negate the top (overflow: error) */
    I_NOT,     /* logical not of the top */
    /* push a op b, a and b popped or read in place (Opnd); overflow, a zero divisor:
     * error. In BinOp's order, from I_ADD = BIN_ADD. */
    I_ADD, I_SUB, I_MUL, I_DIV, I_MOD, I_LT, I_LE, I_GT, I_GE, I_EQ, I_NE,
    I_ANDL,    /* `a && b` after a: when a is 0, leave 0 and jump to v; else pop a */
    I_ORL,     /* `a || b` after a: when a is not 0, leave 1 and jump to v; else pop a */
    I_BOOL,    /* top = top != 0 (the value of `&&`, `||` from b) */
    I_MINMAX,  /* pop v values, push their min (node min) or max; 0 for none */
    I_BADNUM,  /* a number that is not a plain integer: error */
    I_BADCALL, /* a call of an unknown function: error */
    I_END,     /* the values on the stack are the result */
} InsOp;

/* Where an operand of I_ADD .. I_NE (or I_VAR's) comes from: the stack, a constant, or a name
 * read in place. A name is read from vars[slot] (its binding's index when compiled)
 * while e->scoped holds, else looked up; unbound, it is an error at `leaf`. */
typedef enum OpndMode { O_STACK, O_CONST, O_VAR } OpndMode;

typedef struct Opnd {
    uint8_t mode;      /* OpndMode */
    uint32_t slot;     /* O_VAR: index into vars of its binding when compiled, or NO_VAR */
    union {
        int64_t v;         /* O_CONST: the value */
        const char *name;  /* O_VAR: the name (interned) */
    } u;
    const Node *leaf;  /* O_VAR: the name's node */
} Opnd;

typedef struct Ins {
    uint8_t op;        /* InsOp */
    int64_t v;         /* I_CONST: the value; I_ANDL, I_ORL: jump target; I_MINMAX:
                        * count */
    Opnd a, b;
    const Node *node;  /* the node it evaluates, for errors */
} Ins;

static void ins_push(Elab *e, InsOp op, int64_t v, const Node *n)
{
    Ins in = {.op = (uint8_t)op, .v = v, .node = n};
    VEC_PUSH(e->code, e->ncode, e->codecap, in);
}

/* The operand n read in place: a plain integer, or (when `name`) a name. False for
 * anything that is to be computed onto the stack. */
static bool opnd_leaf(const Elab *e, const Node *n, bool name, Opnd *o)
{
    if (n->kind == N_NUM && n->u.num.is_int && !n->u.num.unit && !n->u.num.range_err) {
        *o = (Opnd){.mode = O_CONST, .u.v = n->u.num.ival};
        return true;
    }
    if (n->kind != N_VAR || !name)
        return false;
    *o = (Opnd){.mode = O_VAR, .slot = NO_VAR, .u.name = n->name, .leaf = n};
    (void)ptab_get(&e->vtop, n->name, &o->slot); /* else NO_VAR */
    return true;
}

/* Appends the code of n; *sp is the stack height it starts at, *most the highest so
 * far. */
static void expr_compile(Elab *e, const Node *n, size_t *sp, size_t *most)
{
    switch ((NodeKind)n->kind) {
    case N_NUM:
        if (n->u.num.range_err || !n->u.num.is_int || n->u.num.unit) {
            ins_push(e, I_BADNUM, 0, n); /* counted as a value: never runs past it */
            break;
        }
        ins_push(e, I_CONST, n->u.num.ival, n);
        break;
    case N_VAR:
        ins_push(e, I_VAR, 0, n);
        opnd_leaf(e, n, true, &e->code[e->ncode - 1].a);
        break;
    case N_UNOP:
        expr_compile(e, n->a, sp, most);
        ins_push(e, n->op == '!' ? I_NOT : I_NEG, 0, n);
        return;
    case N_BINOP: {
        if (n->op == BIN_AND || n->op == BIN_OR) {
            expr_compile(e, n->a, sp, most);
            size_t j = e->ncode;
            ins_push(e, n->op == BIN_AND ? I_ANDL : I_ORL, 0, n);
            (*sp)--;
            expr_compile(e, n->b, sp, most);
            ins_push(e, I_BOOL, 0, n);
            e->code[j].v = (int64_t)e->ncode;
            return;
        }
        /* Operands are read in the tree walk's order: a name a in place only when b is
         * read in place too (else b's code, which runs first, could fail first). */
        Opnd a = {.mode = O_STACK}, b = {.mode = O_STACK};
        bool bleaf = opnd_leaf(e, n->b, true, &b);
        if (!opnd_leaf(e, n->a, bleaf, &a))
            expr_compile(e, n->a, sp, most);
        if (!bleaf)
            expr_compile(e, n->b, sp, most);
        ins_push(e, (InsOp)(I_ADD + (n->op - BIN_ADD)), 0, n);
        e->code[e->ncode - 1].a = a;
        e->code[e->ncode - 1].b = b;
        *sp -= (a.mode == O_STACK) + (b.mode == O_STACK);
        break;
    }
    case N_CALL: {
        if (n->name != e->smin && n->name != e->smax) {
            ins_push(e, I_BADCALL, 0, n); /* counted as a value: never runs past it */
            break;
        }
        int64_t cnt = 0;
        for (const Node *x = n->a; x; x = x->next, cnt++)
            expr_compile(e, x, sp, most);
        ins_push(e, I_MINMAX, cnt, n);
        *sp -= (size_t)cnt;
        break;
    }
    case N_OPCALL: /* its arguments, in order, left on the stack */
        for (const Node *x = n->a; x; x = x->next)
            expr_compile(e, x, sp, most);
        return;
    default:
        unreachable();
    }
    if (++*sp > *most) /* a value pushed */
        *most = *sp;
}

/* The first instruction of n's code, compiling it the first time (an expression, or
 * the arguments of an op call). */
static uint32_t expr_code(Elab *e, const Node *n)
{
    uint32_t at;
    if (ptab_get(&e->cstart, n, &at))
        return at;
    if (e->ncode >= UINT32_MAX / 2)
        die("too many compiled expressions");
    at = (uint32_t)e->ncode;
    size_t sp = 0, most = 0;
    expr_compile(e, n, &sp, &most);
    ins_push(e, I_END, 0, n);
    if (most > e->stackcap) {
        e->stackcap = most;
        e->stack = xrealloc(e->stack, most * sizeof *e->stack);
    }
    *ptab_put(&e->cstart, n, at) = at;
    return at;
}

/* Reads operand o (not O_STACK) into *out; false after an unbound name's error. */
static inline bool opnd_read(Elab *e, const Opnd *o, int64_t *out)
{
    if (o->mode == O_CONST) {
        *out = o->u.v;
        return true;
    }
    const char *name = o->u.name;
    uint32_t k = o->slot;
    if (e->scoped && k < e->nvars && e->vars[k].name == name) {
        *out = e->vars[k].val;
        return true;
    }
    return lookup_var(e, name, out) || eval_name_error(e, o->leaf);
}

/* Runs the code at `at` (expr_code): the values it leaves (the stack, bottom first;
 * e->stack, valid until the next run), or NULL after an error. */
static const int64_t *expr_run(Elab *e, uint32_t at)
{
    int64_t *st = e->stack;
    size_t sp = 0;
    for (const Ins *in = &e->code[at];; in++) {
        switch ((InsOp)in->op) {
        case I_CONST:
            st[sp++] = in->v;
            break;
        case I_VAR:
            if (!opnd_read(e, &in->a, &st[sp]))
                return NULL;
            sp++;
            break;
        case I_NEG:
            if (st[sp - 1] == INT64_MIN) {
                eval_neg_error(e, in->node, st[sp - 1]);
                return NULL;
            }
            st[sp - 1] = -st[sp - 1];
            break;
        case I_NOT:
            st[sp - 1] = !st[sp - 1];
            break;
/* I_ADD .. I_NE: the operands a and b (popped or read in place), then *r = a OP b;
 * leaves expr_run with NULL after an unbound name. */
#define BIN_OPERANDS()                                                                   \
    int64_t a, b;                                                                         \
    if (in->b.mode == O_STACK)                                                            \
        b = st[--sp];                                                                     \
    if (in->a.mode == O_STACK)                                                            \
        a = st[--sp];                                                                     \
    else if (!opnd_read(e, &in->a, &a))                                                   \
        return NULL;                                                                      \
    if (in->b.mode != O_STACK && !opnd_read(e, &in->b, &b))                               \
        return NULL;                                                                      \
    int64_t *r = &st[sp++]
#define BIN_CASE(OP, EXPR)                                                               \
    case OP: {                                                                            \
        BIN_OPERANDS();                                                                   \
        *r = (EXPR);                                                                      \
        break;                                                                            \
    }
#define BIN_CASE_OVF(OP, BUILTIN)                                                        \
    case OP: {                                                                            \
        BIN_OPERANDS();                                                                   \
        if (BUILTIN(a, b, r)) {                                                           \
            eval_binop_error(e, in->node, a, b);                                          \
            return NULL;                                                                  \
        }                                                                                 \
        break;                                                                            \
    }
#define BIN_CASE_DIV(OP, EXPR)                                                           \
    case OP: {                                                                            \
        BIN_OPERANDS();                                                                   \
        if (b == 0 || (a == INT64_MIN && b == -1)) {                                      \
            eval_binop_error(e, in->node, a, b);                                          \
            return NULL;                                                                  \
        }                                                                                 \
        *r = (EXPR);                                                                      \
        break;                                                                            \
    }
        BIN_CASE_OVF(I_ADD, __builtin_add_overflow)
        BIN_CASE_OVF(I_SUB, __builtin_sub_overflow)
        BIN_CASE_OVF(I_MUL, __builtin_mul_overflow)
        BIN_CASE_DIV(I_DIV, a / b)
        BIN_CASE_DIV(I_MOD, a % b)
        BIN_CASE(I_LT, a < b)
        BIN_CASE(I_LE, a <= b)
        BIN_CASE(I_GT, a > b)
        BIN_CASE(I_GE, a >= b)
        BIN_CASE(I_EQ, a == b)
        BIN_CASE(I_NE, a != b)
#undef BIN_CASE_DIV
#undef BIN_CASE_OVF
#undef BIN_CASE
#undef BIN_OPERANDS
        case I_ANDL:
        case I_ORL:
            if ((st[sp - 1] != 0) == (in->op == I_ORL)) {
                st[sp - 1] = in->op == I_ORL;
                in = &e->code[in->v] - 1;
            } else {
                sp--;
            }
            break;
        case I_BOOL:
            st[sp - 1] = st[sp - 1] != 0;
            break;
        case I_MINMAX: {
            size_t cnt = (size_t)in->v;
            bool min = in->node->name == e->smin;
            int64_t r = 0;
            for (size_t j = 0; j < cnt; j++) {
                int64_t v = st[sp - cnt + j];
                if (j == 0 || (min ? v < r : v > r))
                    r = v;
            }
            sp -= cnt;
            st[sp++] = r;
            break;
        }
        case I_BADNUM:
            eval_num_error(e, in->node);
            return NULL;
        case I_BADCALL:
            eval_call_error(e, in->node);
            return NULL;
        case I_END:
            return st;
        }
    }
}
_Static_assert(BIN_NE - BIN_ADD == I_NE - I_ADD, "I_ADD .. I_NE follow BinOp");

/* Evaluates an integer expression (int64, overflow checked): a leaf in place, an
 * operator expression as compiled code. */
static bool eval(Elab *e, const Node *n, int64_t *out)
{
    switch ((NodeKind)n->kind) {
    case N_NUM:
        if (n->u.num.range_err || !n->u.num.is_int || n->u.num.unit)
            return eval_num_error(e, n);
        *out = n->u.num.ival;
        return true;
    case N_VAR:
        if (lookup_var(e, n->name, out))
            return true;
        return eval_name_error(e, n);
    case N_UNOP:
    case N_BINOP:
    case N_CALL: {
        const int64_t *v = expr_run(e, expr_code(e, n));
        if (v)
            *out = v[0];
        return v != NULL;
    }
    default:
        unreachable();
    }
}

/* The number of a literal op as written: its micro-batch (chunk false) or its chunk,
 * formatted into buf (n >= 8). A value that saturated its AstOp field is quoted from
 * the source, so `F0.99999999` is reported as chunk 99999999 (cut with "..." when
 * longer than buf). */
static const char *lit_number(Elab *e, const AstOp *o, uint32_t file, bool chunk, char *buf, size_t n)
{
    uint64_t v = chunk ? o->chunk : o->mb;
    if (v != (chunk ? UINT16_MAX : UINT64_MAX)) {
        snprintf(buf, n, "%" PRIu64, v);
        return buf;
    }
    const SrcFile *f = &e->d->files[file];
    const char *s = f->text + o->off, *end = f->text + f->len;
    while (s < end && (*s < '0' || *s > '9')) /* the kind: F B W R SO SI */
        s++;
    if (chunk) {
        while (s < end && *s != '.')
            s++;
        s++;
    }
    size_t k = 0;
    for (; s < end && *s >= '0' && *s <= '9' && k + 4 < n; s++)
        buf[k++] = *s;
    if (s < end && *s >= '0' && *s <= '9') /* longer than buf: cut, and say so */
        buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
    buf[k] = 0;
    return buf;
}

/* Checks a literal op's micro-batch and chunk against M and V, reporting them as
 * written (`value`). */
static bool lit_in_range(Elab *e, const AstOp *o, uint32_t file)
{
    Loc loc = {o->off, file};
    char buf[64];
    if (o->mb >= (uint64_t)e->p->M) {
        EXP_ERROR(e, loc, DIAG_VALUE, "micro-batch %s is out of range (microbatches %d)",
                  lit_number(e, o, file, false, buf, sizeof buf), (int)e->p->M);
        return false;
    }
    if (o->chunk >= (uint32_t)e->p->V) {
        EXP_ERROR(e, loc, DIAG_VALUE, "chunk %s is out of range (chunks %d)",
                  lit_number(e, o, file, true, buf, sizeof buf), (int)e->p->V);
        return false;
    }
    return true;
}

/* True inside a stage block; else reports that `what` (an op, an action) stands
 * outside one. */
static bool in_stage(Elab *e, Loc loc, const char *what)
{
    if (e->cur_stage >= 0)
        return true;
    EXP_ERROR(e, loc, DIAG_SYNTAX, "%s outside a 'stage' block", what);
    return false;
}

/* Counts one more op or action at loc; past frontend_limits.max_ops, false with the
 * limit's error, and expansion stops. */
static bool count_op(Elab *e, Loc loc)
{
    if (++e->nops <= frontend_limits.max_ops)
        return true;
    diag_error(e->d, loc, DIAG_LIMIT, "the schedule has more than %" PRIu64 " ops",
               frontend_limits.max_ops);
    e->stop = true;
    return false;
}

/* Appends op kind mb.chunk to the current stage, checking ranges and limits. */
static void emit(Elab *e, OpKind kind, int64_t mb, int64_t chunk, Loc loc)
{
    Pipeline *p = e->p;
    if (!in_stage(e, loc, "op"))
        return;
    if (mb < 0 || mb >= p->M || chunk < 0 || chunk >= p->V) /* named in the expansion note */
        diag_set_op(e->d, "%s(%" PRId64 ", %" PRId64 ") (stage %d, micro-batch %" PRId64 ")",
                    op_kind_name[kind], mb, chunk, (int)e->cur_stage, mb);
    if (mb < 0 || mb >= p->M) {
        EXP_ERROR(e, loc, DIAG_VALUE, "micro-batch %" PRId64 " is out of range (microbatches %d)", mb,
                  (int)p->M);
        diag_clear_op(e->d);
        return;
    }
    if (chunk < 0 || chunk >= p->V) {
        EXP_ERROR(e, loc, DIAG_VALUE, "chunk %" PRId64 " is out of range (chunks %d)", chunk, (int)p->V);
        diag_clear_op(e->d);
        return;
    }
    if (!count_op(e, loc))
        return;
    Op op = {.mb = (uint32_t)mb, .kind = (uint8_t)kind, .chunk = (uint8_t)chunk, .loc = loc};
    stage_push(&p->stages[e->cur_stage], op);
}

/* Appends runtime action o (AstOp kind OP_NKINDS + ActionKind, numbers in range) to
 * the current stage, before the op the stage lists next (docs/language.md "Runtime
 * actions"). */
static void emit_action(Elab *e, const AstOp *o, Loc loc)
{
    Pipeline *p = e->p;
    if (!in_stage(e, loc, "action"))
        return;
    if (!count_op(e, loc))
        return;
    Action a = {.mb = (uint32_t)o->mb, .pos = p->stages[e->cur_stage].n,
                .rank = (uint16_t)e->cur_stage, .kind = (uint8_t)(o->kind - OP_NKINDS),
                .chunk = (uint8_t)o->chunk, .loc = loc};
    pipeline_push_action(p, a);
}

/* The op kind spelled s (F, B, W, R, SO, SI, OG, LW; s interned), or -1. */
static int op_kind_of(const Elab *e, const char *s)
{
    for (int k = 0; k < OP_NKINDS; k++)
        if (e->skind[k] == s)
            return k;
    return -1;
}

/* An op call F(i) or F(i, c): kind, micro-batch, chunk. */
static bool eval_opcall(Elab *e, const Node *n, int *kind, int64_t *mb, int64_t *chunk)
{
    *kind = op_kind_of(e, n->name);
    if (*kind < 0) {
        EXP_ERROR(e, n->loc, DIAG_NAME, "'%s' is not an op (ops: F, B, W, R, SO, SI)", n->name);
        return false;
    }
    int nargs = 0;
    for (const Node *x = n->a; x; x = x->next)
        nargs++;
    if (nargs < 1 || nargs > 2) {
        EXP_ERROR(e, n->loc, DIAG_SYNTAX, "%s takes a micro-batch and an optional chunk: %s(i) or %s(i, c)",
                  n->name, n->name, n->name);
        return false;
    }
    const int64_t *v = expr_run(e, expr_code(e, n));
    if (!v)
        return false;
    *mb = v[0];
    *chunk = nargs == 2 ? v[1] : 0;
    return true;
}

static bool check_rank(Elab *e, int64_t s, Loc loc)
{
    if (s < 0 || s >= e->p->P) {
        EXP_ERROR(e, loc, DIAG_VALUE, "stage %" PRId64 " is out of range (stages %d)", s, (int)e->p->P);
        return false;
    }
    return true;
}

/* One side of a dep: RANK:OP. */
static bool eval_dep_end(Elab *e, const Node *rank, const Node *opn, OpRef *r)
{
    int64_t s, mb, chunk;
    int kind;
    if (!eval_leaf(e, rank, &s) || !check_rank(e, s, rank->loc))
        return false;
    if (opn->kind == N_OPS) {
        const AstOp *o = &opn->u.run.ops[0];
        if (!lit_in_range(e, o, opn->loc.file))
            return false;
        kind = o->kind;
        mb = (int64_t)o->mb;
        chunk = o->chunk;
    } else if (!eval_opcall(e, opn, &kind, &mb, &chunk)) {
        return false;
    }
    if (mb < 0 || mb >= e->p->M) {
        EXP_ERROR(e, opn->loc, DIAG_VALUE, "micro-batch %" PRId64 " is out of range (microbatches %d)",
                  mb, (int)e->p->M);
        return false;
    }
    if (chunk < 0 || chunk >= e->p->V) {
        EXP_ERROR(e, opn->loc, DIAG_VALUE, "chunk %" PRId64 " is out of range (chunks %d)", chunk,
                  (int)e->p->V);
        return false;
    }
    *r = (OpRef){.mb = (uint32_t)mb, .stage = (uint16_t)s, .kind = (uint8_t)kind, .chunk = (uint8_t)chunk};
    return true;
}

static void exec_list(Elab *e, const Node *list, bool top);

static void exec_schedule(Elab *e, const Node *n);

/* `let NAME = EXPR`: binds NAME for the rest of its list. When EXPR fails, NAME reads
 * an outer binding, or none, so names are no longer where expressions were compiled
 * to read them (Elab.scoped). */
static void exec_let(Elab *e, const Node *n)
{
    int64_t v;
    if (eval_leaf(e, n->a, &v))
        bind(e, n->name, v);
    else
        e->scoped = false;
}

/* `for NAME in LO..HI { ... }` (or `..=`): the body once per value, NAME bound to it;
 * the iterations count against frontend_limits.max_iterations. */
static void exec_for(Elab *e, const Node *n)
{
    int64_t lo, hi;
    if (!eval_leaf(e, n->a, &lo) || !eval_leaf(e, n->b, &hi))
        return;
    if (n->op == RANGE_INCLUSIVE) {
        if (hi == INT64_MAX) {
            EXP_ERROR(e, n->b->loc, DIAG_VALUE, "integer overflow in the end of '..='");
            return;
        }
        hi++;
    }
    uint64_t count = hi > lo ? (uint64_t)hi - (uint64_t)lo : 0;
    if (count > frontend_limits.max_iterations - e->iterations) {
        diag_error(e->d, n->loc, DIAG_LIMIT,
                   "the expansion runs more than %" PRIu64 " loop iterations", frontend_limits.max_iterations);
        e->stop = true;
        return;
    }
    e->iterations += count;
    size_t mark = e->nvars;
    bind(e, n->name, lo);
    for (int64_t i = lo; i < hi && !e->stop && !e->halt; i++) {
        e->vars[mark].val = i;
        exec_list(e, n->body, false);
    }
    unbind_to(e, mark);
}

/* Runs one item of a pipeline or template body. top: directly in a pipeline body. */
static void exec(Elab *e, const Node *n, bool top)
{
    switch ((NodeKind)n->kind) {
    case N_LET:
        exec_let(e, n);
        return;
    case N_FOR:
        exec_for(e, n);
        return;
    case N_REQUIRE: {
        /* `require COND "message"`: a template's (or body's) precondition. When COND is
         * 0 (or cannot be evaluated) the rest of the template is not expanded. */
        int64_t c;
        if (!eval_leaf(e, n->a, &c)) {
            e->halt = true;
            return;
        }
        if (c)
            return;
        e->halt = true;
        EXP_ERROR(e, n->loc, DIAG_VALUE, "%s", n->name);
        return;
    }
    case N_IF: {
        int64_t c;
        if (!eval_leaf(e, n->a, &c))
            return;
        exec_list(e, c ? n->body : n->c, false);
        return;
    }
    case N_STAGE: {
        int64_t s;
        if (e->cur_stage >= 0) {
            EXP_ERROR(e, n->loc, DIAG_SYNTAX, "'stage' blocks cannot be nested");
            return;
        }
        if (!eval_leaf(e, n->a, &s) || !check_rank(e, s, n->a->loc))
            return;
        StageOps *st = &e->p->stages[s];
        if (!st->declared) {
            st->declared = true;
            st->loc = n->loc;
        }
        e->cur_stage = (int32_t)s;
        exec_list(e, n->body, false);
        e->cur_stage = -1;
        return;
    }
    case N_OPS:
        for (uint32_t i = 0; i < n->nops && !e->stop; i++) {
            const AstOp *o = &n->u.run.ops[i];
            if (e->cur_stage >= 0 && !lit_in_range(e, o, n->loc.file))
                continue;
            if (o->kind >= OP_NKINDS)
                emit_action(e, o, (Loc){o->off, n->loc.file});
            else
                emit(e, (OpKind)o->kind, (int64_t)o->mb, o->chunk, (Loc){o->off, n->loc.file});
        }
        return;
    case N_OPCALL: {
        int kind;
        int64_t mb, chunk;
        if (eval_opcall(e, n, &kind, &mb, &chunk))
            emit(e, (OpKind)kind, mb, chunk, n->loc);
        return;
    }
    case N_DEP: {
        Dep dep = {.loc = n->loc};
        if (!eval_dep_end(e, n->a, n->b, &dep.from) || !eval_dep_end(e, n->c, n->d, &dep.to))
            return;
        size_t cap = e->p->depcap;
        VEC_PUSH(e->p->deps, e->p->ndeps, cap, dep);
        e->p->depcap = (uint32_t)cap;
        return;
    }
    case N_SCHEDULE:
        if (top)
            exec_schedule(e, n);
        else
            EXP_ERROR(e, n->loc, DIAG_SYNTAX, "'schedule' is only allowed at the top of a pipeline");
        return;
    default:
        if (ast_is_setting((NodeKind)n->kind)) {
            if (!top)
                EXP_ERROR(e, n->loc, DIAG_SYNTAX, "'%s' is only allowed at the top of a pipeline",
                          node_kind_name[n->kind]);
            return; /* settings were read before the body ran */
        }
        unreachable();
    }
}

static void exec_list(Elab *e, const Node *list, bool top)
{
    size_t mark = e->nvars;
    for (const Node *n = list; n && !e->stop && !e->halt; n = n->next)
        exec(e, n, top);
    unbind_to(e, mark);
}

static Node *find_def(Node **defs, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (defs[i]->name == name)
            return defs[i];
    return NULL;
}

/* A note listing every definition of defs ("templates: gpipe onef1b ..."), for a name
 * with no close match. */
static void note_defs(Diag *d, Loc at, Node **defs, size_t n, const char *what)
{
    if (!n)
        return;
    StrBuf b = {0};
    for (size_t i = 0; i < n; i++)
        sb_printf(&b, "%s%s", i ? " " : "", defs[i]->name);
    diag_note(d, at, "%s: %s", what, b.s);
    sb_free(&b);
}

/* ", did you mean 'NAME'?" for the definition closest to name, or "" (diag_suggest). */
static char *suggest_def(char *buf, size_t len, Node **defs, size_t n, const char *name)
{
    const char **names = xmalloc((n ? n : 1) * sizeof *names);
    for (size_t i = 0; i < n; i++)
        names[i] = defs[i]->name;
    diag_suggest(buf, len, name, names, n);
    free(names);
    return buf;
}

/* `schedule NAME`: runs template NAME with only P, M, V and VSHAPE bound. */
static void exec_schedule(Elab *e, const Node *n)
{
    Node *t = find_def(e->templates, e->ntemplates, n->name);
    if (!t) {
        char hint[96];
        diag_error(e->d, n->loc, DIAG_NAME, "unknown schedule template '%s'%s", n->name,
                   suggest_def(hint, sizeof hint, e->templates, e->ntemplates, n->name));
        if (!hint[0])
            note_defs(e->d, n->loc, e->templates, e->ntemplates, "templates");
        if (!e->ntemplates)
            diag_note(e->d, n->loc, "no templates are defined; the stdlib's are in \"std/schedules.pipe\"");
        return;
    }
    size_t mark = e->nvars;
    int32_t stage = e->cur_stage;
    unbind_to(e, NCONST); /* P, M, V, VSHAPE stay; vars[NCONST..mark) stay readable */
    Var *saved = NULL;
    if (mark > NCONST) { /* pipeline-level lets are not visible inside the template */
        saved = xmalloc((mark - NCONST) * sizeof *saved);
        memcpy(saved, e->vars + NCONST, (mark - NCONST) * sizeof *saved);
    }
    e->cur_stage = -1;
    e->schedule = n;
    /* Errors inside the template, now (a failed `require`, a micro-batch out of range)
     * or later (check, memory, passes), name the `schedule` line that expanded it. */
    char note[160];
    snprintf(note, sizeof note, "expanded from template '%s' (stages %d, microbatches %d, chunks %d)",
             n->name, (int)e->p->P, (int)e->p->M, (int)e->p->V);
    diag_set_expansion(e->d, (Span){t->loc.file, t->loc.off, t->end}, n->loc, note);
    exec_list(e, t->body, false);
    e->schedule = NULL;
    e->halt = false; /* a failed `require` ends the template, not the pipeline */
    e->cur_stage = stage;
    unbind_to(e, NCONST);
    for (size_t i = NCONST; i < mark; i++)
        bind(e, saved[i - NCONST].name, saved[i - NCONST].val);
    free(saved);
}

/* ---- settings ------------------------------------------------------------------- */

typedef struct Settings {
    const Node *stages, *microbatches, *chunks, *memory, *tp, *model, *device, *partition;
    const Node *schedule, *dp, *zero, *grad_dtype, *ep;
} Settings;

static void set_once(Elab *e, const Node **slot, const Node *n)
{
    if (*slot) {
        diag_error(e->d, n->loc, DIAG_VALUE, "'%s' is already set", node_kind_name[n->kind]);
        diag_note(e->d, (*slot)->loc, "it was set here");
        return;
    }
    *slot = n;
}

/* An integer setting (stages, microbatches, chunks, tensor_parallel, data_parallel,
 * expert_parallel) in [lo, hi]. */
static bool int_setting(Elab *e, const Node *n, int64_t lo, int64_t hi, int64_t *out)
{
    if (!eval_leaf(e, n->a, out))
        return false;
    if (*out < lo) {
        diag_error(e->d, n->a->loc, DIAG_VALUE, "'%s' must be at least %" PRId64 " (got %" PRId64 ")",
                   node_kind_name[n->kind], lo, *out);
        return false;
    }
    if (*out > hi) {
        diag_error(e->d, n->a->loc, DIAG_LIMIT, "'%s' %" PRId64 " exceeds the limit of %" PRId64,
                   node_kind_name[n->kind], *out, hi);
        return false;
    }
    return true;
}

/* Copies a model/device definition's fields, then appends the overrides. */
static Entity *resolve_entity(Elab *e, const Node *ref, Node **defs, size_t ndefs, const char *what)
{
    const Node *def = find_def(defs, ndefs, ref->name);
    if (!def) {
        char hint[96];
        diag_error(e->d, ref->loc, DIAG_NAME, "unknown %s '%s'%s", what, ref->name,
                   suggest_def(hint, sizeof hint, defs, ndefs, ref->name));
        if (!hint[0])
            note_defs(e->d, ref->loc, defs, ndefs, !strcmp(what, "model") ? "models" : "devices");
        if (!ndefs)
            diag_note(e->d, ref->loc, "no %ss are defined; the stdlib's are in \"std/%ss.pipe\"", what, what);
        return NULL;
    }
    bool ok = true;
    uint32_t n1, n2;
    Field *f1 = make_fields(e, def->body, &n1, &ok);
    Field *f2 = make_fields(e, ref->body, &n2, &ok);
    Entity *ent = xcalloc(1, sizeof *ent);
    ent->name = xstrdup(ref->name);
    ent->loc = def->loc;
    ent->nfields = n1 + n2;
    ent->fields = ent->nfields ? xmalloc(ent->nfields * sizeof *ent->fields) : NULL;
    if (n1)
        memcpy(ent->fields, f1, n1 * sizeof *f1);
    if (n2)
        memcpy(ent->fields + n1, f2, n2 * sizeof *f2);
    free(f1);
    free(f2);
    return ent;
}

static void read_costs(Elab *e, const Node *n)
{
    Pipeline *p = e->p;
    CostBlock *blk = &p->costs;
    if (n->op != COSTS_ALL) {
        int64_t i;
        if (!eval_leaf(e, n->a, &i))
            return;
        int64_t lim = n->op == COSTS_STAGE ? p->P : (int64_t)p->P * p->V;
        if (i < 0 || i >= lim) {
            diag_error(e->d, n->a->loc, DIAG_VALUE, "%s %" PRId64 " is out of range (%s %" PRId64 ")",
                       n->op == COSTS_STAGE ? "stage" : "virtual stage", i,
                       n->op == COSTS_STAGE ? "stages" : "virtual stages", lim);
            return;
        }
        blk = n->op == COSTS_STAGE ? &p->stage_costs[i] : &p->vstage_costs[i];
    }
    if (blk->loc.file == LOC_NONE_FILE)
        blk->loc = n->loc;
    for (const Node *f = n->body; f; f = f->next) {
        int k = -1;
        for (int j = 0; j < COST_NFIELDS; j++)
            if (strcmp(cost_field_name[j], f->name) == 0)
                k = j;
        if (k < 0) {
            StrBuf all = {0};
            for (int j = 0; j < COST_NFIELDS; j++)
                sb_printf(&all, "%s%s", j ? " " : "", cost_field_name[j]);
            char hint[96];
            diag_error(e->d, f->loc, DIAG_NAME, "unknown cost '%s'%s (costs: %s)", f->name,
                       diag_suggest(hint, sizeof hint, f->name, cost_field_name, COST_NFIELDS),
                       all.s);
            sb_free(&all);
            continue;
        }
        if (n->op == COSTS_VSTAGE && cost_field_scope[k] != SCOPE_VSTAGE) {
            diag_error(e->d, f->loc, DIAG_VALUE,
                       "'%s' is a per-rank cost; set it in 'costs' or 'costs stage N'", f->name);
            continue;
        }
        if (n->op != COSTS_ALL && cost_field_scope[k] == SCOPE_PIPELINE) {
            diag_error(e->d, f->loc, DIAG_VALUE,
                       "'%s' applies to the whole pipeline; set it in 'costs'", f->name);
            continue;
        }
        if (f->a->kind != N_NUM) {
            diag_error(e->d, f->a->loc, DIAG_VALUE, "cost '%s' takes a number", f->name);
            continue;
        }
        char what[48];
        snprintf(what, sizeof what, "cost '%s'", f->name);
        double v;
        if (!num_convert(e, f->a, cost_field_unit[k], what, &v))
            continue;
        if (v < 0) {
            diag_error(e->d, f->a->loc, DIAG_VALUE, "cost '%s' must not be negative", f->name);
            continue;
        }
        if ((cost_field_unit[k] == UNIT_TIME && v > IR_MAX_COST_MS) ||
            (cost_field_unit[k] == UNIT_SIZE && v > IR_MAX_COST_BYTES)) {
            diag_error(e->d, f->a->loc, DIAG_LIMIT, "cost '%s' exceeds the limit of %s", f->name,
                       cost_field_unit[k] == UNIT_TIME ? "1e9 ms" : "1 PiB");
            continue;
        }
        if ((k == COST_PARAMS || k == COST_EXPERT_PARAMS) && v > IR_MAX_COST_PARAMS) {
            diag_error(e->d, f->a->loc, DIAG_LIMIT, "cost '%s' exceeds the limit of 2^50", f->name);
            continue;
        }
        if ((k == COST_HOST_BW || k == COST_DP_BW || k == COST_MEM_BW) && v == 0) {
            diag_error(e->d, f->a->loc, DIAG_VALUE, "cost '%s' must be positive", f->name);
            continue;
        }
        if (k == COST_HOST_LINK_RANKS && (v < 1 || v != floor(v) || v > INT32_MAX)) {
            diag_error(e->d, f->a->loc, DIAG_VALUE, "cost 'host_link_ranks' must be a positive integer");
            continue;
        }
        if (k == COST_SWAP_FRACTION && v > 1) {
            diag_error(e->d, f->a->loc, DIAG_VALUE, "cost 'swap_fraction' must be between 0 and 1");
            continue;
        }
        blk->v[k] = v;
        blk->set |= 1u << k;
    }
}

/* The value node of field `name` in the `costs` line at `at` of pipeline pl (NULL when
 * none), for a diagnostic about a value read_costs stored. */
static const Node *cost_value_node(const Node *pl, Loc at, const char *name)
{
    for (const Node *n = pl->body; n; n = n->next)
        if (n->kind == N_COSTS && n->loc.file == at.file && n->loc.off == at.off)
            for (const Node *f = n->body; f; f = f->next)
                if (!strcmp(f->name, name))
                    return f->a;
    return NULL;
}

/* The block of p whose value of field f applies to (rank s, chunk c): as ir_cost looks
 * it up; NULL when none sets it. */
static const CostBlock *cost_source(const Pipeline *p, int32_t s, int32_t c, CostField f)
{
    uint32_t bit = 1u << f;
    const CostBlock *vb = &p->vstage_costs[ir_vstage(p, s, c)];
    if (vb->set & bit)
        return vb;
    if (p->stage_costs[s].set & bit)
        return &p->stage_costs[s];
    return p->costs.set & bit ? &p->costs : NULL;
}

/* `ckpt` and `wact` are parts of what F produces (docs/spec.md "Memory"; docs/semantics.md):
 * a written one above the virtual stage's `act` is a `value` error at it, once per
 * block. The act compared is the written one, or without a model the default; with a
 * model and no written act the cost model derives act (and keeps ckpt, wact below it). */
static void check_cost_parts(Elab *e, const Node *pl, bool has_model)
{
    Pipeline *p = e->p;
    static const CostField parts[] = {COST_CKPT, COST_WACT};
    const CostBlock **seen = xcalloc(2 * (size_t)p->P * (size_t)p->V + 2, sizeof *seen);
    size_t nseen = 0;
    for (int32_t s = 0; s < p->P; s++)
        for (int32_t c = 0; c < p->V; c++) {
            if (has_model && !cost_source(p, s, c, COST_ACT))
                continue;
            double act = ir_cost(p, s, c, COST_ACT);
            for (size_t i = 0; i < ARRAY_LEN(parts); i++) {
                const CostBlock *b = cost_source(p, s, c, parts[i]);
                if (!b || !(ir_cost(p, s, c, parts[i]) > act))
                    continue;
                bool dup = false;
                for (size_t j = 0; j < nseen && !dup; j++)
                    dup = seen[j] == b;
                if (dup)
                    continue;
                seen[nseen++] = b;
                const Node *v = cost_value_node(pl, b->loc, cost_field_name[parts[i]]);
                char got[PRINT_NUM_MAX], lim[PRINT_NUM_MAX];
                diag_error(e->d, v ? v->loc : b->loc, DIAG_VALUE,
                           "'%s' %s is more than the 'act' %s of virtual stage %d: it is the part "
                           "of the activations %s keeps",
                           cost_field_name[parts[i]], print_size(got, sizeof got, b->v[parts[i]]),
                           print_size(lim, sizeof lim, act), (int)ir_vstage(p, s, c),
                           parts[i] == COST_CKPT ? "F" : "B");
            }
        }
    free(seen);
}

static void read_partition(Elab *e, const Node *n)
{
    Pipeline *p = e->p;
    p->partition_set = true;
    p->partition_loc = n->loc;
    if (n->op == PARTITION_EVEN) {
        p->partition_even = true;
        return;
    }
    uint32_t cnt = 0;
    for (const Node *x = n->body; x; x = x->next)
        cnt++;
    /* One entry per stage, or with chunks one per virtual stage in model order (the
     * cost model splits a per-stage entry over the stage's chunks; docs/cost-model.md). */
    if (!ir_partition_count_ok(p, cnt)) {
        diag_error(e->d, n->loc, DIAG_VALUE, "'partition' lists %u stages, but the pipeline has %d", cnt,
                   (int)p->P);
        if (p->V > 1)
            diag_note(e->d, n->loc, "with chunks %d, give one entry per stage or one per virtual stage (%d)",
                      (int)p->V, (int)(p->P * p->V));
        return;
    }
    p->partition = xmalloc(cnt * sizeof *p->partition);
    for (const Node *x = n->body; x; x = x->next) {
        double v;
        if (!num_convert(e, x, UNIT_NONE, "'partition'", &v))
            continue;
        if (v < 0 || v * 2 != floor(v * 2)) {
            diag_error(e->d, x->loc, DIAG_VALUE,
                       "a partition entry is a number of layers, a multiple of 0.5, not negative");
            continue;
        }
        p->partition[p->npartition++] = v;
    }
}

/* The argument of `policy block(N)` (N >= 1 layers) or `policy keep(T, ...)` (tensor
 * names, docs/cost-model.md "Keep-sets") into *arg; the other policies take none. False
 * after an error (`value`, at the argument). */
static bool read_policy_args(Elab *e, const Node *n, RecomputePolicy pol, uint32_t *arg)
{
    const Node *x = n->body;
    *arg = 0;
    if (pol == POLICY_BLOCK) {
        if (!x || x->next || x->kind != N_NUM || !x->u.num.is_int || x->u.num.unit ||
            x->u.num.ival < 1 || x->u.num.ival > 1000000) {
            diag_error(e->d, x ? x->loc : n->b->loc, DIAG_VALUE,
                       "policy 'block' takes the number of layers it recomputes per virtual "
                       "stage, e.g. block(3)");
            return false;
        }
        *arg = (uint32_t)x->u.num.ival;
        return true;
    }
    if (pol == POLICY_KEEP) {
        for (; x; x = x->next) {
            uint32_t m;
            if (x->kind != N_VIDENT || keep_parse(x->name, &m)) {
                char hint[96];
                const char *nm = x->kind == N_VIDENT ? x->name : "";
                diag_error(e->d, x->loc, DIAG_VALUE, "'%s' is not a tensor the keep policy can keep%s",
                           x->kind == N_VIDENT ? x->name : "this",
                           diag_suggest(hint, sizeof hint, nm, keep_tensor_name, KEEP_N));
                diag_note(e->d, x->loc, "keep tensors: attn_norm qkv core attn_out attn_mask "
                                        "mlp_in mlp_norm fc1 act_fn mlp_mask (docs/cost-model.md)");
                return false;
            }
            *arg |= m;
        }
        return true;
    }
    if (x) {
        diag_error(e->d, x->loc, DIAG_VALUE, "policy '%s' takes no arguments", policy_name[pol]);
        return false;
    }
    return true;
}

static void read_recompute(Elab *e, const Node *n)
{
    Pipeline *p = e->p;
    int64_t lo, hi;
    const Node *r = n->a;
    if (r->kind == N_VIDENT && strcmp(r->name, "all") == 0) {
        lo = 0;
        hi = p->P;
    } else if (r->kind == N_NUM && r->u.num.is_int && !r->u.num.unit) {
        lo = r->u.num.ival;
        hi = lo + 1;
    } else if (r->kind == N_VRANGE) {
        Value v;
        if (!make_value(e, r, &v))
            return;
        lo = v.lo;
        hi = v.hi;
    } else {
        diag_error(e->d, r->loc, DIAG_VALUE, "'recompute stages' takes a range such as 0..=2, a stage, or all");
        return;
    }
    if (lo < 0 || hi > p->P || lo >= hi) {
        diag_error(e->d, r->loc, DIAG_VALUE,
                   "recompute stages %" PRId64 "..%" PRId64 " are not a non-empty range within stages %d",
                   lo, hi, (int)p->P);
        return;
    }
    int pol = -1;
    for (int i = 0; i < POLICY_N; i++)
        if (strcmp(policy_name[i], n->b->name) == 0)
            pol = i;
    if (pol < 0) {
        char hint[96];
        diag_error(e->d, n->b->loc, DIAG_VALUE,
                   "unknown recompute policy '%s'%s (policies: none, full, selective, cmb, mlp, block(N), keep(...))",
                   n->b->name, diag_suggest(hint, sizeof hint, n->b->name, policy_name, POLICY_N));
        return;
    }
    uint32_t arg = 0;
    if (!read_policy_args(e, n, (RecomputePolicy)pol, &arg))
        return;
    bool per_layer = false;
    if (n->c) { /* `granularity layer` (docs/language.md) */
        per_layer = strcmp(n->c->name, "layer") == 0;
        if (!per_layer && strcmp(n->c->name, "stage") != 0) {
            diag_error(e->d, n->c->loc, DIAG_VALUE,
                       "unknown recompute granularity '%s' (granularities: stage, layer)", n->c->name);
            return;
        }
    }
    RecomputeDir dir = {.lo = (int32_t)lo, .hi = (int32_t)hi, .policy = (RecomputePolicy)pol,
                        .arg = arg, .per_layer = per_layer, .loc = n->loc};
    size_t cap = p->nrecompute;
    VEC_PUSH(p->recompute, p->nrecompute, cap, dir);
}

/* One pass call (`apply` or `pipec opt --pass`); false when an argument's value was
 * reported bad (the call keeps the good ones). */
static bool make_pass_call(Elab *e, const Node *n, PassCall *c)
{
    bool ok = true;
    *c = (PassCall){.name = xstrdup(n->name), .loc = n->loc};
    c->args = make_fields(e, n->body, &c->nargs, &ok);
    return ok;
}

static void read_apply(Elab *e, const Node *n)
{
    Pipeline *p = e->p;
    PassCall c;
    make_pass_call(e, n, &c);
    size_t cap = p->npasses;
    VEC_PUSH(p->passes, p->npasses, cap, c);
}

PassCall *parse_pass_list(Diag *d, uint32_t file, uint32_t *n)
{
    AstCtx c;
    ast_init(&c);
    Elab E = {.d = d};
    PassCall *calls = NULL;
    size_t cap = 0;
    bool ok = true;
    *n = 0;
    for (const Node *x = ast_parse_pass_list(d, &c, file); x; x = x->next) {
        PassCall call;
        ok &= make_pass_call(&E, x, &call);
        VEC_PUSH(calls, *n, cap, call);
    }
    ast_free(&c);
    if (!ok || !calls) {
        pass_calls_free(calls, *n);
        *n = 0;
        return NULL;
    }
    return calls;
}

void pass_calls_free(PassCall *calls, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        free(calls[i].name);
        for (uint32_t j = 0; j < calls[i].nargs; j++) {
            free(calls[i].args[j].key);
            value_free(&calls[i].args[j].val);
        }
        free(calls[i].args);
    }
    free(calls);
}

static void collect_defs(Elab *e)
{
    for (uint32_t i = 0; i < e->prog->nfiles; i++)
        for (Node *n = e->prog->files[i].items; n; n = n->next) {
            Node ***defs;
            size_t *cnt, *cap;
            const char *what;
            switch ((NodeKind)n->kind) {
            case N_TEMPLATE: defs = &e->templates; cnt = &e->ntemplates; cap = &e->tcap; what = "template"; break;
            case N_MODELDEF: defs = &e->models; cnt = &e->nmodels; cap = &e->mcap; what = "model"; break;
            case N_DEVICEDEF: defs = &e->devices; cnt = &e->ndevices; cap = &e->dcap; what = "device"; break;
            default: continue;
            }
            Node *prev = find_def(*defs, *cnt, n->name);
            if (prev) {
                diag_error(e->d, n->loc, DIAG_NAME, "%s '%s' is already defined", what, n->name);
                diag_note(e->d, prev->loc, "the first definition is here");
                continue;
            }
            VEC_PUSH(*defs, *cnt, *cap, n);
        }
}

/* Phase 1: the settings of the pipeline body, each at most once. */
static void find_settings(Elab *e, const Node *pl, Settings *s)
{
    for (const Node *n = pl->body; n; n = n->next)
        switch ((NodeKind)n->kind) {
        case N_STAGES: set_once(e, &s->stages, n); break;
        case N_MICROBATCHES: set_once(e, &s->microbatches, n); break;
        case N_CHUNKS: set_once(e, &s->chunks, n); break;
        case N_MEMORY: set_once(e, &s->memory, n); break;
        case N_TP: set_once(e, &s->tp, n); break;
        case N_MODEL: set_once(e, &s->model, n); break;
        case N_DEVICE: set_once(e, &s->device, n); break;
        case N_PARTITION: set_once(e, &s->partition, n); break;
        case N_SCHEDULE: set_once(e, &s->schedule, n); break;
        case N_DP: set_once(e, &s->dp, n); break;
        case N_ZERO: set_once(e, &s->zero, n); break;
        case N_GRAD_DTYPE: set_once(e, &s->grad_dtype, n); break;
        case N_EP: set_once(e, &s->ep, n); break;
        default: break;
        }
}

/* Phase 2: P, M and V into *P, *M, *V (and the placement); false when one is missing,
 * out of range or over the limit. Expressions here see no names: P, M and V are being
 * defined. */
static bool read_shape(Elab *e, const Node *pl, const Settings *s, int64_t *P, int64_t *M,
                       int64_t *V)
{
    Pipeline *p = e->p;
    bool shape_ok = true;
    if (!s->stages) {
        diag_error(e->d, pl->loc, DIAG_VALUE, "pipeline '%s' does not set 'stages'", pl->name);
        shape_ok = false;
    } else {
        shape_ok &= int_setting(e, s->stages, 1, IR_MAX_STAGES, P);
        p->shape_loc[0] = s->stages->loc;
    }
    if (!s->microbatches) {
        diag_error(e->d, pl->loc, DIAG_VALUE, "pipeline '%s' does not set 'microbatches'", pl->name);
        shape_ok = false;
    } else {
        shape_ok &= int_setting(e, s->microbatches, 1, IR_MAX_MICROBATCHES, M);
        p->shape_loc[1] = s->microbatches->loc;
    }
    if (s->chunks) {
        shape_ok &= int_setting(e, s->chunks, 1, IR_MAX_CHUNKS, V);
        p->shape_loc[2] = s->chunks->loc;
        if (s->chunks->op == PLACE_VSHAPE)
            p->placement = PLACE_VSHAPE;
    }
    /* A template's header `chunks N [placement]` (docs/language.md "Templates") is the
     * shape it is defined for: a pipeline that runs it takes N when it has no `chunks`
     * line, and the placement when it writes none. */
    const Node *t = s->schedule ? find_def(e->templates, e->ntemplates, s->schedule->name) : NULL;
    const Node *tc = t ? t->a : NULL;
    if (tc && (!s->chunks || s->chunks->op == CHUNKS_UNPLACED)) {
        if (!s->chunks) {
            shape_ok &= int_setting(e, tc, 1, IR_MAX_CHUNKS, V);
            p->shape_loc[2] = s->schedule->loc;
        }
        if (tc->op == PLACE_VSHAPE)
            p->placement = PLACE_VSHAPE;
    }
    if (shape_ok && (uint64_t)*P * (uint64_t)*V > frontend_limits.max_vstages) {
        diag_error(e->d, s->chunks ? s->chunks->loc : s->stages->loc, DIAG_LIMIT,
                   "stages * chunks = %" PRId64 " virtual stages exceeds the limit of %" PRIu64,
                   *P * *V, frontend_limits.max_vstages);
        shape_ok = false;
    }
    return shape_ok;
}

/* The data-parallel settings (docs/language.md "Data parallelism"): `data_parallel D`
 * (1..IR_MAX_DATA_PARALLEL), `zero 0|1|2|3`, `grad_dtype bf16|fp32`; `value` errors at
 * the value. */
static void read_dp_settings(Elab *e, const Settings *s)
{
    Pipeline *p = e->p;
    int64_t v;
    if (s->dp) {
        p->dp_loc = s->dp->loc;
        if (int_setting(e, s->dp, 1, IR_MAX_DATA_PARALLEL, &v))
            p->data_parallel = (int32_t)v;
    }
    if (s->zero) {
        p->zero_loc = s->zero->loc;
        if (eval_leaf(e, s->zero->a, &v)) {
            if (v < 0 || v > IR_MAX_ZERO)
                diag_error(e->d, s->zero->a->loc, DIAG_VALUE,
                           "'zero' is the ZeRO stage: 0, 1, 2 or 3 (got %" PRId64 ")", v);
            else
                p->zero = (int32_t)v;
        }
    }
    if (s->grad_dtype) {
        p->grad_dtype_loc = s->grad_dtype->loc;
        int k = 0;
        while (k < GRAD_NDTYPES && strcmp(grad_dtype_name[k], s->grad_dtype->name))
            k++;
        if (k == GRAD_NDTYPES)
            diag_error(e->d, s->grad_dtype->loc, DIAG_VALUE,
                       "unknown grad_dtype '%s': bf16 or fp32", s->grad_dtype->name);
        else
            p->grad_dtype = (GradDtype)k;
    }
    /* `expert_parallel E`: the E ranks that share a layer's experts are data-parallel
     * replicas (docs/language.md "Expert parallelism"), so E divides D; the cost model
     * checks E against the model's experts (docs/cost-model.md "Mixture of experts"). */
    if (s->ep) {
        p->ep_loc = s->ep->loc;
        if (int_setting(e, s->ep, 1, IR_MAX_EXPERT_PARALLEL, &v)) {
            p->expert_parallel = (int32_t)v;
            if (p->data_parallel % p->expert_parallel != 0) {
                diag_error(e->d, s->ep->a->loc, DIAG_VALUE,
                           "expert_parallel %d does not divide data_parallel %d",
                           (int)p->expert_parallel, (int)p->data_parallel);
                diag_note(e->d, s->dp ? s->dp->loc : s->ep->loc,
                          "the expert-parallel ranks are data-parallel replicas, each routing "
                          "its own tokens: data_parallel must be a multiple of expert_parallel");
            }
        }
    }
}

/* Phase 3: the settings that do not need the shape: memory, tensor_parallel, model,
 * device, schedule, the data-parallel settings. */
static void read_unshaped_settings(Elab *e, const Settings *s)
{
    Pipeline *p = e->p;
    if (s->memory) {
        double m;
        p->shape_loc[3] = s->memory->loc;
        if (num_convert(e, s->memory->a, UNIT_SIZE, "'memory'", &m)) {
            if (m < 0)
                diag_error(e->d, s->memory->a->loc, DIAG_VALUE, "'memory' must not be negative");
            p->has_memory = true;
            p->memory = m;
        }
    }
    if (s->tp) {
        int64_t tp;
        p->tp_loc = s->tp->loc;
        if (int_setting(e, s->tp, 1, INT32_MAX, &tp))
            p->tensor_parallel = (int32_t)tp;
    }
    read_dp_settings(e, s);
    if (s->model)
        p->model = resolve_entity(e, s->model, e->models, e->nmodels, "model");
    /* The device's memory (less what it reserves) becomes the budget when `memory` is
     * not set: the cost model does that, as it reads the device's fields. */
    if (s->device)
        p->device = resolve_entity(e, s->device, e->devices, e->ndevices, "device");
    if (s->schedule) {
        p->schedule = xstrdup(s->schedule->name);
        p->schedule_loc = s->schedule->loc;
    }
}

/* Phase 4: costs, partition, recomputation and passes (they need the shape). */
static void read_shaped_settings(Elab *e, const Node *pl, const Settings *s)
{
    for (const Node *n = pl->body; n; n = n->next)
        switch ((NodeKind)n->kind) {
        case N_COSTS: read_costs(e, n); break;
        case N_PARTITION:
            if (n == s->partition)
                read_partition(e, n);
            break;
        case N_RECOMPUTE: read_recompute(e, n); break;
        case N_APPLY: read_apply(e, n); break;
        default: break;
        }
}

Pipeline *elaborate(Diag *d, const Program *prog)
{
    const Node *pl = prog->pipeline;
    if (!pl)
        return NULL;
    int before = d->nerr;
    AstCtx *c = prog->ctx;
    Elab E = {.d = d, .prog = prog, .cur_stage = -1, .scoped = true};
    Elab *e = &E;
    e->sP = ast_intern(c, "P", 1);
    e->sM = ast_intern(c, "M", 1);
    e->sV = ast_intern(c, "V", 1);
    e->sVSHAPE = ast_intern(c, "VSHAPE", 6);
    e->smin = ast_intern(c, "min", 3);
    e->smax = ast_intern(c, "max", 3);
    for (int k = 0; k < OP_NKINDS; k++)
        e->skind[k] = ast_intern(c, op_kind_name[k], strlen(op_kind_name[k]));
    collect_defs(e);

    Pipeline *p = e->p = pipeline_new();
    p->name = xstrdup(pl->name);
    p->loc = pl->loc;

    Settings s = {0};
    find_settings(e, pl, &s);
    int64_t P = 0, M = 0, V = 1;
    bool shape_ok = read_shape(e, pl, &s, &P, &M, &V);
    read_unshaped_settings(e, &s);
    if (shape_ok) {
        pipeline_set_shape(p, (int32_t)P, (int32_t)M, (int32_t)V);
        bind(e, e->sP, P);
        bind(e, e->sM, M);
        bind(e, e->sV, V);
        bind(e, e->sVSHAPE, p->placement == PLACE_VSHAPE);
        read_shaped_settings(e, pl, &s);
        if (d->nerr == before)
            check_cost_parts(e, pl, s.model != NULL);
        /* Phase 5: the body as a program: stage blocks, deps, lets, loops, `schedule`. */
        e->nexp_err = 0;
        exec_list(e, pl->body, true);
        pipeline_sort_actions(p); /* stage blocks may come in any order */
    }

    free(e->templates);
    free(e->models);
    free(e->devices);
    free(e->vars);
    ptab_free(&e->vtop);
    free(e->code);
    ptab_free(&e->cstart);
    free(e->stack);
    free(e->seen);
    if (d->nerr != before) {
        pipeline_free(p);
        return NULL;
    }
    return p;
}
