/* csv.c - PyTorch pipelining schedule CSV import and export; see csv.h and docs/csv.md.
 *
 * The reader follows torch/distributed/pipelining/schedules.py: _load_csv reads rows
 * with csv.reader, one per rank, and _Action.from_str parses each stripped cell with
 * the regex (\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)
 * or the composite form (a;b;...)TYPE. We accept the same language, plus `BW` (the
 * full-backward spelling of older PyTorch releases, still in its test artifacts), and
 * are stricter in one way: nothing may follow the micro-batch index. */
#include "csv.h"

#include "actions.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Compute action kinds, in the order a (stage, micro-batch) group is sorted. B is the
 * full backward of current PyTorch and the input-gradient half of older releases (whose
 * full backward is BW); pipec's B means either, decided by whether a W exists. */
typedef enum ActKind { ACT_F, ACT_I, ACT_B, ACT_BW, ACT_W, ACT_N } ActKind;

static const char *const act_spelling[ACT_N] = {"F", "I", "B", "BW", "W"};

/* One compute action of the CSV. 28 bytes. */
typedef struct Act {
    uint32_t stage;  /* PyTorch stage index = pipec virtual stage */
    uint32_t mb;     /* micro-batch */
    uint32_t rank;   /* row */
    uint32_t kind;   /* ActKind */
    uint32_t pos;    /* index in file order */
    Loc loc;         /* the action in the CSV */
} Act;

/* Runtime actions (ActionKind of ir.h) are read as kind -10 - k, kept in file order
 * (Reader.comms, kind = k) and checked with the compute actions by actions_check. */
#define ACTION_CODE(k) (-10 - (int)(k))

/* Action types of the regex, longest spelling first where one is a prefix of another
 * (BW before B), the compute actions (most cells) first. kind < 0: a runtime action,
 * ACTION_CODE(ActionKind). */
#define ACT_TYPE(name, kind) {name, sizeof name - 1, kind}
static const struct {
    const char *name;
    size_t len;
    int kind;
} act_types[] = {
    ACT_TYPE("BW", ACT_BW), ACT_TYPE("F", ACT_F), ACT_TYPE("I", ACT_I), ACT_TYPE("B", ACT_B),
    ACT_TYPE("W", ACT_W),
    ACT_TYPE("SEND_F", ACTION_CODE(ACTION_SEND_F)), ACT_TYPE("RECV_F", ACTION_CODE(ACTION_RECV_F)),
    ACT_TYPE("SEND_B", ACTION_CODE(ACTION_SEND_B)), ACT_TYPE("RECV_B", ACTION_CODE(ACTION_RECV_B)),
    ACT_TYPE("UNSHARD", ACTION_CODE(ACTION_UNSHARD)),
    ACT_TYPE("RESHARD", ACTION_CODE(ACTION_RESHARD)),
    ACT_TYPE("REDUCE_GRAD", ACTION_CODE(ACTION_REDUCE_GRAD)),
};
#undef ACT_TYPE

/* Largest stage index and micro-batch the IR can hold. */
#define CSV_MAX_STAGE ((uint64_t)IR_MAX_STAGES * IR_MAX_CHUNKS - 1)
#define CSV_MAX_MB ((uint64_t)IR_MAX_MICROBATCHES - 1)

typedef struct Reader {
    Diag *d;
    uint32_t file;
    const char *text;
    uint32_t len;
    Act *acts;
    size_t nacts, cap;
    uint32_t nrows;
    Loc *row_loc;    /* [nrows] start of each row */
    size_t nrow_loc, row_cap;
    bool too_many;   /* the op limit was reported */
    Act *comms;      /* runtime actions, file order; kind = ActionKind */
    size_t ncomms, comm_cap;
} Reader;

static Loc at(const Reader *r, uint32_t off)
{
    return (Loc){off, r->file};
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Reads a run of digits at c[*i..n) into *v. Returns false (and *v = UINT64_MAX) when
 * the number exceeds max. No digits leaves *i unchanged. */
static bool read_uint(const char *c, size_t n, size_t *i, uint64_t max, uint64_t *v)
{
    uint64_t x = 0;
    bool big = false;
    while (*i < n && is_digit(c[*i])) {
        if (!big) {
            x = x * 10 + (uint64_t)(c[*i] - '0');
            if (x > max)
                big = true;
        }
        (*i)++;
    }
    *v = big ? UINT64_MAX : x;
    return !big;
}

/* True when c[0..n) is `\d*(RECV_B|RECV_F)\d+`, the second half of a batched
 * communication action of older PyTorch releases. */
static bool batched_comm_suffix(const char *c, size_t n)
{
    size_t i = 0;
    while (i < n && is_digit(c[i]))
        i++;
    if (n - i < 7 || (memcmp(c + i, "RECV_B", 6) != 0 && memcmp(c + i, "RECV_F", 6) != 0))
        return false;
    i += 6; /* n - i >= 1: at least one byte follows, which must be a digit */
    while (i < n && is_digit(c[i]))
        i++;
    return i == n;
}

/* Appends runtime action kind k of (stage, mb) on row rank at byte offset off. */
static void push_action(Reader *r, uint32_t stage, uint32_t mb, uint32_t rank, uint32_t k,
                        uint32_t off)
{
    Act a = {stage, mb, rank, k, (uint32_t)r->ncomms, at(r, off)};
    VEC_PUSH(r->comms, r->ncomms, r->comm_cap, a);
}

/* Parses one simple action c[0..n) (already stripped) at byte offset off of row rank;
 * appends compute actions. in_overlap: inside (..)OVERLAP_F_B, where only compute
 * actions may appear. `cell` and `celln` are the whole cell, for messages. */
static void parse_simple(Reader *r, const char *c, size_t n, uint32_t off, uint32_t rank,
                         bool in_overlap, const char *cell, size_t celln)
{
    int cw = celln > 60 ? 60 : (int)celln;
    size_t i = 0;
    uint64_t stage, mb;
    if (n == 0 || !is_digit(c[0])) {
        diag_error(r->d, at(r, off), DIAG_SYNTAX,
                   "bad action '%.*s': an action starts with its stage index, as in 2F0",
                   cw, cell);
        return;
    }
    if (!read_uint(c, n, &i, CSV_MAX_STAGE, &stage)) {
        diag_error(r->d, at(r, off), DIAG_LIMIT,
                   "stage index in '%.*s' is beyond the limit of %llu stages", cw, cell,
                   (unsigned long long)CSV_MAX_STAGE + 1);
        return;
    }
    int kind = -2;
    for (size_t t = 0; t < ARRAY_LEN(act_types); t++) {
        size_t k = act_types[t].len;
        if (n - i >= k && c[i] == act_types[t].name[0] && memcmp(c + i, act_types[t].name, k) == 0) {
            kind = act_types[t].kind;
            i += k;
            break;
        }
    }
    if (kind == -2) {
        diag_error(r->d, at(r, off + (uint32_t)i), DIAG_SYNTAX,
                   "bad action '%.*s': unknown action type; expected F, I, B, W, BW, "
                   "SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD or REDUCE_GRAD",
                   cw, cell);
        return;
    }
    size_t mb_at = i;
    if (!read_uint(c, n, &i, CSV_MAX_MB, &mb)) {
        diag_error(r->d, at(r, off + (uint32_t)mb_at), DIAG_LIMIT,
                   "micro-batch index in '%.*s' is beyond the limit of %llu micro-batches",
                   cw, cell, (unsigned long long)CSV_MAX_MB + 1);
        return;
    }
    if (kind < 0 && i < n && c[i] == '_' && batched_comm_suffix(c + i + 1, n - i - 1))
        return; /* older PyTorch's batched pair, such as 1SEND_F0_2RECV_B0: skipped */
    if (i < n) {
        diag_error(r->d, at(r, off + (uint32_t)i), DIAG_SYNTAX,
                   "bad action '%.*s': unexpected '%c' after the %s", cw, cell, c[i],
                   i > mb_at ? "micro-batch index" : "action type");
        return;
    }
    if (kind < 0 && in_overlap) {
        diag_error(r->d, at(r, off), DIAG_SYNTAX,
                   "bad action '%.*s': only compute actions (F, I, B, W) can overlap", cw, cell);
        return;
    }
    uint32_t ak = (uint32_t)(ACTION_CODE(0) - kind);
    if (kind < 0 && !ACTION_IS_P2P(ak)) { /* UNSHARD, RESHARD, REDUCE_GRAD: no micro-batch */
        push_action(r, (uint32_t)stage, 0, rank, ak, off);
        return;
    }
    if (i == mb_at) {
        diag_error(r->d, at(r, off + (uint32_t)i), DIAG_SYNTAX,
                   "bad action '%.*s': a compute action needs a micro-batch index, as in 2F0",
                   cw, cell);
        return;
    }
    if (kind < 0) {
        push_action(r, (uint32_t)stage, (uint32_t)mb, rank, ak, off);
        return;
    }
    if (r->nacts >= IR_MAX_OPS) {
        if (!r->too_many)
            diag_error(r->d, at(r, off), DIAG_LIMIT,
                       "more than %u compute actions; the limit is %u ops", IR_MAX_OPS,
                       IR_MAX_OPS);
        r->too_many = true;
        return;
    }
    Act a = {(uint32_t)stage, (uint32_t)mb, rank, (uint32_t)kind, (uint32_t)r->nacts,
             at(r, off)};
    VEC_PUSH(r->acts, r->nacts, r->cap, a);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Parses one cell's text c[0..n) that starts at byte offset off. */
static void parse_cell(Reader *r, const char *c, size_t n, uint32_t off, uint32_t rank)
{
    while (n > 0 && is_blank(*c))
        c++, n--, off++;
    while (n > 0 && is_blank(c[n - 1]))
        n--;
    if (n == 0)
        return; /* a bubble */
    int cw = n > 60 ? 60 : (int)n;
    if (c[0] != '(') {
        parse_simple(r, c, n, off, rank, false, c, n);
        return;
    }
    const char *close = memchr(c, ')', n);
    if (!close) {
        diag_error(r->d, at(r, off), DIAG_SYNTAX, "bad action '%.*s': '(' without ')'", cw, c);
        return;
    }
    size_t ci = (size_t)(close - c);
    const char *type = close + 1;
    size_t tn = n - ci - 1;
    if (tn != strlen("OVERLAP_F_B") || memcmp(type, "OVERLAP_F_B", tn) != 0) {
        diag_error(r->d, at(r, off + (uint32_t)ci + 1), DIAG_SYNTAX,
                   "bad action '%.*s': unknown composite action type '%.*s'; expected "
                   "OVERLAP_F_B", cw, c, (int)(tn > 30 ? 30 : tn), type);
        return;
    }
    size_t start = 1, nsub = 0, nacts0 = r->nacts, ncomms0 = r->ncomms;
    for (size_t i = 1; i <= ci; i++) {
        if (i < ci && c[i] != ';')
            continue;
        const char *s = c + start;
        size_t sn = i - start;
        uint32_t soff = off + (uint32_t)start;
        while (sn > 0 && is_blank(*s))
            s++, sn--, soff++;
        while (sn > 0 && is_blank(s[sn - 1]))
            sn--;
        if (sn > 0) {
            parse_simple(r, s, sn, soff, rank, true, c, n);
            nsub++;
        }
        start = i + 1;
    }
    if (nsub == 0)
        diag_error(r->d, at(r, off), DIAG_SYNTAX, "bad action '%.*s': no actions inside ( )",
                   cw, c);
    else if (r->nacts == nacts0 + 2 && r->ncomms == ncomms0) /* kept as the pair it is */
        push_action(r, 0, 0, rank, ACTION_OVERLAP_F_B, off);
}

/* Splits the text into rows and cells (RFC 4180 quoting, "\n" or "\r\n" line ends; a
 * last line without its newline still counts). */
static void read_rows(Reader *r)
{
    const char *s = r->text;
    uint32_t n = r->len, i = 0;
    StrBuf q = {0};
    while (i < n) {
        uint32_t rank = r->nrows++;
        VEC_PUSH(r->row_loc, r->nrow_loc, r->row_cap, at(r, i));
        for (;;) { /* one cell per iteration */
            uint32_t start = i;
            if (i < n && s[i] == '"') {
                q.len = 0;
                if (q.s)
                    q.s[0] = 0;
                i++;
                bool closed = false;
                while (i < n && s[i] != '\n') {
                    if (s[i] == '"') {
                        if (i + 1 < n && s[i + 1] == '"') {
                            sb_putc(&q, '"');
                            i += 2;
                            continue;
                        }
                        closed = true;
                        i++;
                        break;
                    }
                    sb_putc(&q, s[i++]);
                }
                if (!closed) {
                    diag_error(r->d, at(r, start), DIAG_SYNTAX,
                               "unterminated quoted cell: a '\"' opens it and the line ends");
                } else if (i < n && s[i] != ',' && s[i] != '\n' &&
                           !(s[i] == '\r' && (i + 1 == n || s[i + 1] == '\n'))) {
                    diag_error(r->d, at(r, i), DIAG_SYNTAX,
                               "unexpected '%c' after a quoted cell; expected ',' or the "
                               "end of the line", s[i]);
                } else {
                    parse_cell(r, sb_str(&q), q.len, start + 1, rank);
                }
                while (i < n && s[i] != ',' && s[i] != '\n')
                    i++;
            } else {
                while (i < n && s[i] != ',' && s[i] != '\n')
                    i++;
                uint32_t e = i;
                if (e > start && s[e - 1] == '\r')
                    e--;
                parse_cell(r, s + start, e - start, start, rank);
            }
            if (i < n && s[i] == ',') {
                i++;
                continue;
            }
            break;
        }
        if (i < n && s[i] == '\n')
            i++;
    }
    sb_free(&q);
}

/* Writes "2F0"-style action text. */
static char *act_name(char *buf, size_t n, uint32_t stage, int kind, uint32_t mb)
{
    snprintf(buf, n, "%u%s%u", stage, act_spelling[kind], mb);
    return buf;
}

/* The byte d (0 lowest) of the key (stage, micro-batch, kind) of a: kind's four bytes,
 * then the micro-batch's, then the stage's. */
static unsigned act_digit(const Act *a, int d)
{
    uint32_t v = d < 4 ? a->kind : d < 8 ? a->mb : a->stage;
    return (v >> (8 * (d & 3))) & 0xff;
}

/* Orders acts[0..n), given in file order, by (stage, micro-batch, kind, position in the
 * file): a stable radix sort on (stage, micro-batch, kind), least significant byte
 * first, which keeps file order among equal keys; a byte that is the same in every
 * action takes no pass. Linear in n (a qsort was two fifths of an import of 131,072
 * actions). */
static void sort_acts(Act *acts, size_t n)
{
    if (!n)
        return;
    /* every byte's counts in one pass over the actions */
    uint32_t (*cnt)[257] = xcalloc(12, sizeof *cnt);
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < 12; d++)
            cnt[d][act_digit(&acts[i], d) + 1]++;
    Act *tmp = xmalloc(n * sizeof *tmp), *src = acts, *dst = tmp;
    for (int d = 0; d < 12; d++) {
        uint32_t *c = cnt[d];
        if (c[act_digit(&src[0], d) + 1] == n)
            continue;
        for (int k = 0; k < 256; k++)
            c[k + 1] += c[k];
        for (size_t i = 0; i < n; i++)
            dst[c[act_digit(&src[i], d)]++] = src[i];
        Act *t = src;
        src = dst;
        dst = t;
    }
    if (src != acts)
        memcpy(acts, src, n * sizeof *acts);
    free(tmp);
    free(cnt);
}

/* Checks the backward split of one (stage, micro-batch), actions g[0..n) sorted by
 * kind: an I needs a W, a W needs an I or a B (the older spelling of I), and a full
 * backward BW takes no W. */
static void check_split(Reader *r, const Act *g, size_t n)
{
    const Act *first[ACT_N] = {NULL};
    for (size_t k = 0; k < n; k++)
        if (!first[g[k].kind])
            first[g[k].kind] = &g[k];
    char b1[48], b2[48];
    const Act *i = first[ACT_I], *w = first[ACT_W], *bw = first[ACT_BW];
    if (i && !w) {
        diag_error(r->d, i->loc, DIAG_MISSING,
                   "backward-input action %s has no weight-gradient action %s",
                   act_name(b1, sizeof b1, i->stage, ACT_I, i->mb),
                   act_name(b2, sizeof b2, i->stage, ACT_W, i->mb));
    } else if (w && bw) {
        diag_error(r->d, w->loc, DIAG_VALUE,
                   "weight-gradient action %s after the full backward %s, which already "
                   "computed the weight gradients",
                   act_name(b1, sizeof b1, w->stage, ACT_W, w->mb),
                   act_name(b2, sizeof b2, w->stage, ACT_BW, w->mb));
        diag_note(r->d, bw->loc, "the full backward is here");
    } else if (w && !i && !first[ACT_B]) {
        diag_error(r->d, w->loc, DIAG_MISSING,
                   "weight-gradient action %s has no backward-input action %s",
                   act_name(b1, sizeof b1, w->stage, ACT_W, w->mb),
                   act_name(b2, sizeof b2, w->stage, ACT_I, w->mb));
    }
}

/* The owner of one stage index: its first action. */
typedef struct Owner {
    uint32_t stage, rank;
    Loc loc;
} Owner;

/* Phase 1: the owner (rank) of every stage index, in stage order, into *own, and the
 * largest micro-batch; reports a stage on two ranks and an unpaired backward split.
 * Sorts by (stage, mb, kind) to find owners, gaps and unpaired I/W without arrays as
 * large as the stage or micro-batch numbers. */
static void find_owners(Reader *r, Owner **own, size_t *nown, uint32_t *maxmb)
{
    Diag *d = r->d;
    Act *sorted = xmalloc(r->nacts * sizeof *sorted);
    memcpy(sorted, r->acts, r->nacts * sizeof *sorted);
    sort_acts(sorted, r->nacts);
    size_t owncap = 0;
    bool reported = false;
    *maxmb = 0;
    for (size_t k = 0; k < r->nacts; k++) {
        const Act *a = &sorted[k];
        Owner *last = *nown ? &(*own)[*nown - 1] : NULL;
        if (a->mb > *maxmb)
            *maxmb = a->mb;
        if (!last || last->stage != a->stage) {
            Owner o = {a->stage, a->rank, a->loc};
            VEC_PUSH(*own, *nown, owncap, o);
            reported = false;
        } else if (last->rank != a->rank && !reported) {
            char b[48];
            diag_error(d, a->loc, DIAG_PLACEMENT,
                       "stage %u is on rank %u and on rank %u (%s); a stage belongs to one rank",
                       a->stage, last->rank, a->rank,
                       act_name(b, sizeof b, a->stage, (int)a->kind, a->mb));
            diag_note(d, last->loc, "stage %u is first on rank %u here", a->stage, last->rank);
            reported = true;
        }
    }
    for (size_t k = 0; k < r->nacts;) { /* one (stage, micro-batch) group at a time */
        size_t e = k + 1;
        while (e < r->nacts && sorted[e].stage == sorted[k].stage && sorted[e].mb == sorted[k].mb)
            e++;
        check_split(r, sorted + k, e - k);
        k = e;
    }
    free(sorted);
}

/* Phase 2: V and the placement from a consistent stage -> rank map own[nown] over P
 * ranks; false after an error (a gap in the stage numbers, stages that do not spread
 * evenly, a stage off both placements). */
static bool infer_placement(Reader *r, const Owner *own, size_t nown, uint32_t P, uint32_t *V,
                            bool *vshape)
{
    Diag *d = r->d;
    int nerr0 = d->nerr;
    for (size_t i = 0; i < nown; i++) {
        if (own[i].stage != i) {
            diag_error(d, own[i].loc, DIAG_MISSING,
                       "stage %u has actions but stage %zu has none; stages are numbered "
                       "0, 1, ... without gaps", own[i].stage, i);
            return false;
        }
    }
    uint32_t S = (uint32_t)nown;
    if (S % P != 0) {
        diag_error(d, own[S - 1].loc, DIAG_PLACEMENT,
                   "%u stages (0..%u) cannot be spread evenly over %u ranks (rows); every "
                   "rank holds the same number of stages", S, S - 1, P);
        return false;
    }
    *V = S / P;
    if (*V > IR_MAX_CHUNKS) {
        diag_error(d, own[S - 1].loc, DIAG_LIMIT,
                   "%u stages over %u ranks make %u chunks per rank; the limit is %u", S, P, *V,
                   IR_MAX_CHUNKS);
        return false;
    }
    /* Chunk 0 is rank r's stage r in both placements; chunk 1 tells them apart. */
    *vshape = *V >= 2 && P >= 2 && own[P].rank == P - 1;
    for (uint32_t v = 0; v < S; v++) {
        uint32_t c = v / P, rr = v % P;
        uint32_t want = *vshape && (c & 1) ? P - 1 - rr : rr;
        if (own[v].rank != want)
            diag_error(d, own[v].loc, DIAG_PLACEMENT,
                       "stage %u is on rank %u; the %s placement of %u stages over %u ranks "
                       "puts it on rank %u", v, own[v].rank,
                       *vshape ? "V-shape" : "looped (interleaved)", S, P, want);
    }
    return d->nerr == nerr0;
}

/* One entry of the merged file order: a compute action (comm false: r->acts[i]) or a
 * runtime action (r->comms[i]). */
typedef struct Ref {
    bool comm;
    uint32_t i;
} Ref;

/* The compute and runtime actions merged in file order (both lists are in it). */
static Ref *merge_order(const Reader *r, size_t *n)
{
    *n = r->nacts + r->ncomms;
    Ref *m = xmalloc((*n + 1) * sizeof *m);
    size_t a = 0, c = 0;
    for (size_t k = 0; k < *n; k++) {
        bool comm = a == r->nacts ||
                    (c < r->ncomms && r->comms[c].loc.off < r->acts[a].loc.off);
        m[k] = (Ref){comm, (uint32_t)(comm ? c++ : a++)};
    }
    return m;
}

/* Phase 2b: the runtime actions against PyTorch's runtime (actions.h), on the CSV's
 * own spelling and locations. own[S] is the stage -> rank map. */
static void check_actions(Reader *r, const Owner *own, uint32_t S, const Ref *order, size_t n)
{
    if (!r->ncomms)
        return;
    static const uint32_t seq_kind[ACT_N] = {SEQ_F, SEQ_B, SEQ_B, SEQ_B, SEQ_W};
    uint32_t *owner = xmalloc((S + 1) * sizeof *owner);
    for (uint32_t v = 0; v < S; v++)
        owner[v] = own[v].rank;
    SeqItem *it = xmalloc((n + 1) * sizeof *it);
    for (size_t k = 0; k < n; k++) {
        const Act *a = order[k].comm ? &r->comms[order[k].i] : &r->acts[order[k].i];
        it[k] = (SeqItem){a->rank, a->stage, a->mb,
                          order[k].comm ? SEQ_ACTION + a->kind : seq_kind[a->kind],
                          order[k].comm ? NULL : act_spelling[a->kind], a->loc};
    }
    SeqStyle style = {true, NULL};
    actions_check(r->d, it, n, r->nrows, owner, S, &style);
    free(it);
    free(owner);
}

/* Phase 3: the pipeline of shape (P, M, V) with r->acts as its ops, in file order, and
 * the CSV's placeholder costs. */
static Pipeline *make_pipeline(const Reader *r, const char *name, uint32_t P, uint32_t M,
                               uint32_t V, bool vshape, const Ref *order, size_t norder)
{
    Loc top = at(r, 0);
    Pipeline *p = pipeline_new();
    p->name = xstrdup(name);
    p->loc = top;
    pipeline_set_shape(p, (int32_t)P, (int32_t)M, (int32_t)V);
    p->placement = vshape ? PLACE_VSHAPE : PLACE_INTERLEAVED;
    bool has_w = false;
    for (size_t k = 0; k < norder; k++) {
        if (order[k].comm) { /* kept before the op the rank lists next */
            const Act *c = &r->comms[order[k].i];
            Action act = {c->mb, p->stages[c->rank].n, (uint16_t)c->rank, (uint8_t)c->kind,
                          (uint8_t)(c->stage / P), c->loc};
            pipeline_push_action(p, act);
            continue;
        }
        const Act *a = &r->acts[order[k].i];
        static const uint8_t to_op[ACT_N] = {OP_F, OP_B, OP_B, OP_B, OP_W};
        Op op = {a->mb, to_op[a->kind], (uint8_t)(a->stage / P), 0, a->loc};
        stage_push(&p->stages[a->rank], op);
        has_w |= a->kind == ACT_W;
    }
    for (uint32_t s = 0; s < P; s++) {
        p->stages[s].declared = true;
        p->stages[s].loc = r->row_loc[s];
    }
    p->costs.v[COST_F] = CSV_COST_F;
    p->costs.v[COST_B] = CSV_COST_B;
    p->costs.set = 1u << COST_F | 1u << COST_B;
    if (has_w) {
        p->costs.v[COST_W] = CSV_COST_W;
        p->costs.set |= 1u << COST_W;
    }
    p->costs.loc = top;
    return p;
}

/* Infers P, V, M and the placement from r->acts and builds the pipeline. */
static Pipeline *build(Reader *r, const char *name)
{
    Diag *d = r->d;
    Loc top = at(r, 0);
    if (r->nrows == 0) {
        diag_error(d, top, DIAG_MISSING, "empty schedule CSV: expected one row per rank");
        return NULL;
    }
    if (r->nrows > IR_MAX_STAGES) {
        diag_error(d, r->row_loc[IR_MAX_STAGES], DIAG_LIMIT,
                   "%u rows (ranks); the limit is %u", r->nrows, IR_MAX_STAGES);
        return NULL;
    }
    if (r->nacts == 0) {
        diag_error(d, top, DIAG_MISSING, "no compute action (F, I, B, W) in the CSV");
        return NULL;
    }
    uint32_t P = r->nrows, maxmb, V = 1;
    int nerr0 = d->nerr;
    Owner *own = NULL;
    size_t nown = 0;
    bool vshape = false;
    find_owners(r, &own, &nown, &maxmb);
    Pipeline *p = NULL;
    /* placement is inferred only from a consistent stage -> rank map */
    if (d->nerr == nerr0 && infer_placement(r, own, nown, P, &V, &vshape)) {
        size_t norder;
        Ref *order = merge_order(r, &norder);
        check_actions(r, own, (uint32_t)nown, order, norder);
        if (d->nerr == nerr0)
            p = make_pipeline(r, name, P, maxmb + 1, V, vshape, order, norder);
        free(order);
    }
    free(own);
    return p;
}

/* The dialect the actions are spelt in: legacy when a full backward is BW, or when
 * backwards are split by W without any I (older releases' B is the input half). */
static CsvFormat dialect_of(const Reader *r)
{
    bool bw = false, i = false, w = false;
    for (size_t k = 0; k < r->nacts; k++) {
        bw |= r->acts[k].kind == ACT_BW;
        i |= r->acts[k].kind == ACT_I;
        w |= r->acts[k].kind == ACT_W;
    }
    return bw || (w && !i) ? CSV_LEGACY : CSV_CURRENT;
}

Pipeline *csv_import(Diag *d, uint32_t file, const char *name)
{
    return csv_import_dialect(d, file, name, NULL);
}

Pipeline *csv_import_dialect(Diag *d, uint32_t file, const char *name, CsvFormat *fmt)
{
    Reader r = {0};
    r.d = d;
    r.file = file;
    r.text = d->files[file].text;
    r.len = d->files[file].len;
    int nerr0 = d->nerr;
    read_rows(&r);
    if (fmt)
        *fmt = dialect_of(&r);
    Pipeline *p = d->nerr == nerr0 ? build(&r, name) : NULL;
    free(r.acts);
    free(r.row_loc);
    free(r.comms);
    return p;
}

/* --- export ---------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* One cell of an exported row: a compute action (CELL_F, CELL_I the input-gradient
 * half, CELL_B the full backward, CELL_W) or CELL_ACTION + ActionKind. An OVERLAP_F_B
 * cell is followed by the two cells it pairs. */
enum { CELL_F, CELL_I, CELL_B, CELL_W, CELL_ACTION };

typedef struct Cell {
    uint32_t kind, stage, mb;
    Loc loc;
} Cell;

/* A rank's cells. */
typedef struct Row {
    Cell *c;
    size_t n, cap;
} Row;

/* The cells of every rank of p, ops and kept actions in listed order (p2p false: the
 * SEND/RECV actions left out, for the lowering to place its own). B is I when a W of
 * the same (virtual stage, micro-batch) exists. Ops without a PyTorch action are left
 * out with one warning per kind; returns their number in *dropped. */
static Row *export_rows(Diag *d, const Pipeline *p, bool p2p, uint64_t *dropped)
{
    /* Keys (virtual stage, micro-batch) of every W, sorted: a B with a W is an I. */
    uint64_t *wkeys = NULL;
    size_t nw = 0, wcap = 0;
    for (int32_t s = 0; s < p->P; s++)
        for (uint32_t i = 0; i < p->stages[s].n; i++) {
            const Op *o = &p->stages[s].ops[i];
            if (o->kind == OP_W) {
                uint64_t key = (uint64_t)ir_vstage(p, s, o->chunk) << 32 | o->mb;
                VEC_PUSH(wkeys, nw, wcap, key);
            }
        }
    if (nw)
        qsort(wkeys, nw, sizeof *wkeys, cmp_u64);
    Row *rows = xcalloc((size_t)p->P, sizeof *rows);
    bool warned[OP_NKINDS] = {false};
    size_t k = 0;
    *dropped = 0;
    for (int32_t s = 0; s < p->P; s++) {
        Row *row = &rows[s];
        const StageOps *st = &p->stages[s];
        for (uint32_t i = 0; i <= st->n; i++) {
            for (; k < p->nactions && p->actions[k].rank == s && p->actions[k].pos <= i; k++) {
                const Action *a = &p->actions[k];
                if (!p2p && ACTION_IS_P2P(a->kind))
                    continue;
                Cell c = {CELL_ACTION + a->kind, (uint32_t)ir_vstage(p, s, a->chunk), a->mb, a->loc};
                VEC_PUSH(row->c, row->n, row->cap, c);
            }
            if (i == st->n)
                break;
            const Op *o = &st->ops[i];
            uint32_t v = (uint32_t)ir_vstage(p, s, o->chunk), kind;
            uint64_t key = (uint64_t)v << 32 | o->mb;
            switch (o->kind) {
            case OP_F:
                kind = CELL_F;
                break;
            case OP_B:
                kind = nw && bsearch(&key, wkeys, nw, sizeof *wkeys, cmp_u64) ? CELL_I : CELL_B;
                break;
            case OP_W:
                kind = CELL_W;
                break;
            default:
                (*dropped)++;
                if (!warned[o->kind]) {
                    char b[48];
                    diag_warning(d, o->loc, WARN_CSV,
                                 "%s ops have no PyTorch pipelining action; %s and the other "
                                 "%s ops are left out of the CSV", op_kind_name[o->kind],
                                 op_name(b, sizeof b, (OpKind)o->kind, o->mb, o->chunk),
                                 op_kind_name[o->kind]);
                    warned[o->kind] = true;
                }
                continue;
            }
            Cell c = {kind, v, o->mb, o->loc};
            VEC_PUSH(row->c, row->n, row->cap, c);
        }
    }
    if (p->ndeps)
        diag_warning(d, p->deps[0].loc, WARN_CSV,
                     "the schedule's %u dep edge%s cannot be written to a PyTorch CSV and %s "
                     "left out", p->ndeps, p->ndeps == 1 ? "" : "s",
                     p->ndeps == 1 ? "is" : "are");
    free(wkeys);
    return rows;
}

static void free_rows(Row *rows, int32_t P)
{
    for (int32_t s = 0; s < P; s++)
        free(rows[s].c);
    free(rows);
}

/* Appends one simple cell in dialect fmt: "2F0", "1I3" (legacy "1B3"), "1B0" (legacy
 * "1BW0"), "0W3", "2SEND_F0", "0UNSHARD" (PyTorch writes no micro-batch there). */
static void put_cell(StrBuf *out, const Cell *c, CsvFormat fmt)
{
    static const char *const spell[2][4] = {{"F", "I", "B", "W"}, {"F", "B", "BW", "W"}};
    if (c->kind < CELL_ACTION)
        sb_printf(out, "%u%s%u", c->stage, spell[fmt == CSV_LEGACY][c->kind], c->mb);
    else if (ACTION_IS_P2P(c->kind - CELL_ACTION))
        sb_printf(out, "%u%s%u", c->stage, action_kind_name[c->kind - CELL_ACTION], c->mb);
    else
        sb_printf(out, "%u%s", c->stage, action_kind_name[c->kind - CELL_ACTION]);
}

/* Writes the rows, one line each; an OVERLAP_F_B cell takes the two after it as
 * "(a;b)OVERLAP_F_B". */
static void put_rows(StrBuf *out, const Row *rows, int32_t P, CsvFormat fmt)
{
    for (int32_t s = 0; s < P; s++) {
        const Row *row = &rows[s];
        for (size_t i = 0; i < row->n; i++) {
            if (i)
                sb_putc(out, ',');
            const Cell *c = &row->c[i];
            if (c->kind == CELL_ACTION + ACTION_OVERLAP_F_B && i + 2 < row->n) {
                sb_putc(out, '(');
                put_cell(out, &row->c[i + 1], fmt);
                sb_putc(out, ';');
                put_cell(out, &row->c[i + 2], fmt);
                sb_puts(out, ")OVERLAP_F_B");
                i += 2;
            } else if (c->kind != CELL_ACTION + ACTION_OVERLAP_F_B) {
                put_cell(out, c, fmt);
            } else if (i + 1 < row->n) { /* a pair cut short: its one action */
                put_cell(out, &row->c[++i], fmt);
            }
        }
        sb_putc(out, '\n');
    }
}

uint64_t csv_export(Diag *d, const Pipeline *p, CsvFormat fmt, StrBuf *out)
{
    uint64_t dropped;
    Row *rows = export_rows(d, p, true, &dropped);
    put_rows(out, rows, p->P, fmt);
    free_rows(rows, p->P);
    return dropped;
}

/* --- the comms form: PyTorch's lowering ------------------------------------------- */

/* _merge_bw: an I directly followed by the W of the same stage and micro-batch becomes
 * one full backward B. */
static void merge_bw(Row *row)
{
    size_t k = 0;
    for (size_t i = 0; i < row->n; i++) {
        Cell c = row->c[i];
        if (c.kind == CELL_I && i + 1 < row->n && row->c[i + 1].kind == CELL_W &&
            row->c[i + 1].stage == c.stage && row->c[i + 1].mb == c.mb &&
            !(i > 0 && row->c[i - 1].kind == CELL_ACTION + ACTION_OVERLAP_F_B)) {
            c.kind = CELL_B;
            i++;
        }
        row->c[k++] = c;
    }
    row->n = k;
}

/* What the lowering has placed, per (virtual stage, micro-batch): bits of the kinds
 * _ready_to_schedule asks about. Every one of them is placed on the owner of its stage,
 * so one table serves all ranks. */
enum { DONE_F = 1, DONE_I = 2, DONE_B = 4, DONE_RECV_F = 8, DONE_RECV_B = 16 };

typedef struct Lower {
    const Pipeline *p;
    uint32_t S, M;
    uint8_t *done;  /* [S*M] DONE_* bits */
} Lower;

static uint8_t *done_at(const Lower *L, uint32_t v, uint32_t mb)
{
    return &L->done[(size_t)v * L->M + mb];
}

static uint32_t owner_of(const Lower *L, uint32_t v)
{
    int32_t s, c;
    ir_owner(L->p, (int32_t)v, &s, &c);
    return (uint32_t)s;
}

/* _ready_to_schedule: an F waits for its input (RECV_F, or the F of the previous stage
 * on the same rank), a backward (I or B) for its gradient (RECV_B, or the backward of
 * the next stage). */
static bool ready(const Lower *L, const Cell *c)
{
    if (c->kind == CELL_F && c->stage != 0)
        return (*done_at(L, c->stage, c->mb) & DONE_RECV_F) ||
               (*done_at(L, c->stage - 1, c->mb) & DONE_F);
    if ((c->kind == CELL_I || c->kind == CELL_B) && c->stage != L->S - 1)
        return (*done_at(L, c->stage, c->mb) & DONE_RECV_B) ||
               (*done_at(L, c->stage + 1, c->mb) & (DONE_I | DONE_B));
    return true;
}

/* _has_comms: an F sends to the next stage and a backward to the previous one when
 * that stage is on another rank. */
static bool has_comms(const Lower *L, const Cell *c)
{
    if (c->kind == CELL_F)
        return c->stage != L->S - 1 && owner_of(L, c->stage + 1) != owner_of(L, c->stage);
    if (c->kind == CELL_I || c->kind == CELL_B)
        return c->stage != 0 && owner_of(L, c->stage - 1) != owner_of(L, c->stage);
    return false;
}

static void mark_done(const Lower *L, const Cell *c)
{
    static const uint8_t bit[4] = {DONE_F, DONE_I, DONE_B, 0};
    if (c->kind < CELL_ACTION)
        *done_at(L, c->stage, c->mb) |= bit[c->kind];
    else if (c->kind == CELL_ACTION + ACTION_RECV_F)
        *done_at(L, c->stage, c->mb) |= DONE_RECV_F;
    else if (c->kind == CELL_ACTION + ACTION_RECV_B)
        *done_at(L, c->stage, c->mb) |= DONE_RECV_B;
}

int csv_export_comms(Diag *d, const Pipeline *p, CsvFormat fmt, StrBuf *out)
{
    int nerr0 = d->nerr;
    uint32_t S = (uint32_t)p->P * (uint32_t)p->V, M = (uint32_t)p->M;
    if ((uint64_t)S * M > (1u << 28)) {
        diag_error(d, p->loc, DIAG_LIMIT,
                   "%u virtual stages x %u micro-batches are too many for export-csv --comms "
                   "(at most 2^28)", S, M);
        return 1;
    }
    uint64_t dropped;
    Row *in = export_rows(d, p, false, &dropped);
    Row *res = xcalloc((size_t)p->P, sizeof *res);
    Lower L = {p, S, M, xcalloc((size_t)S * M + 1, 1)};
    size_t *head = xcalloc((size_t)p->P + 1, sizeof *head);
    for (int32_t s = 0; s < p->P; s++)
        merge_bw(&in[s]);
    /* _add_send_recv: round-robin over the ranks in order; a rank places its next unit
     * (an action, or an OVERLAP_F_B with its pair) when every compute in it is ready,
     * then after each compute its SEND, and the RECV at the end of the receiver's row. */
    for (bool left = true; left;) {
        bool progress = false;
        left = false;
        for (int32_t s = 0; s < p->P; s++) {
            Row *row = &in[s];
            if (head[s] >= row->n)
                continue;
            size_t h = head[s], len = 1;
            if (row->c[h].kind == CELL_ACTION + ACTION_OVERLAP_F_B)
                len = h + 3 <= row->n ? 3 : row->n - h;
            bool ok = true;
            for (size_t k = h; k < h + len; k++)
                ok = ok && ready(&L, &row->c[k]);
            if (!ok) {
                left = true;
                continue;
            }
            for (size_t k = h; k < h + len; k++)
                VEC_PUSH(res[s].c, res[s].n, res[s].cap, row->c[k]);
            for (size_t k = h; k < h + len; k++) {
                const Cell *c = &row->c[k];
                mark_done(&L, c);
                if (!has_comms(&L, c))
                    continue;
                bool f = c->kind == CELL_F;
                Cell send = {CELL_ACTION + (f ? ACTION_SEND_F : ACTION_SEND_B), c->stage, c->mb,
                             c->loc};
                Cell recv = {CELL_ACTION + (f ? ACTION_RECV_F : ACTION_RECV_B),
                             f ? c->stage + 1 : c->stage - 1, c->mb, c->loc};
                Row *to = &res[owner_of(&L, recv.stage)];
                VEC_PUSH(res[s].c, res[s].n, res[s].cap, send);
                VEC_PUSH(to->c, to->n, to->cap, recv);
                mark_done(&L, &recv);
            }
            head[s] = h + len;
            progress = true;
            left |= head[s] < row->n;
        }
        if (left && !progress) {
            /* PyTorch: "Malformed compute schedule, can't schedule sends/recvs" */
            for (int32_t s = 0; s < p->P; s++) {
                if (head[s] >= in[s].n)
                    continue;
                char b[48];
                const Cell *c = &in[s].c[head[s]];
                if (c->kind == CELL_ACTION + ACTION_OVERLAP_F_B && head[s] + 1 < in[s].n)
                    c = &in[s].c[head[s] + 1];
                StrBuf t = {0};
                put_cell(&t, c, fmt);
                snprintf(b, sizeof b, "%s", sb_str(&t));
                sb_free(&t);
                diag_error(d, c->loc, DIAG_DEADLOCK,
                           "PyTorch's lowering cannot place SEND/RECV: stage %d waits in %s for "
                           "an input no rank will send", (int)s, b);
                break;
            }
            break;
        }
    }
    if (d->nerr == nerr0)
        put_rows(out, res, p->P, fmt);
    free(head);
    free(L.done);
    free_rows(in, p->P);
    free_rows(res, p->P);
    return d->nerr - nerr0;
}

char *csv_name_from_path(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    StrBuf b = {0};
    if (n == 0 || is_digit(base[0]))
        sb_putc(&b, '_');
    for (size_t i = 0; i < n; i++) {
        char c = base[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_';
        sb_putc(&b, ok ? c : '_');
    }
    return b.s;
}
