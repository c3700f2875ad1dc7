/* csv.c - PyTorch pipelining schedule CSV import and export; see csv.h and docs/csv.md.
 *
 * The reader follows torch/distributed/pipelining/schedules.py: _load_csv reads rows
 * with csv.reader, one per rank, and _Action.from_str parses each stripped cell with
 * the regex (\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)
 * or the composite form (a;b;...)TYPE. We accept the same language, plus `BW` (the
 * full-backward spelling of older PyTorch releases, still in its test artifacts), and
 * are stricter in one way: nothing may follow the micro-batch index. */
#include "csv.h"

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

/* Point-to-point actions of the comms form (-10 - index into comm_spelling), kept
 * only to check their pairing; see check_comms. */
enum { COMM_SEND_F = -10, COMM_RECV_F = -11, COMM_SEND_B = -12, COMM_RECV_B = -13 };

static const char *const comm_spelling[4] = {"SEND_F", "RECV_F", "SEND_B", "RECV_B"};

/* Action types of the regex, longest spelling first where one is a prefix of another
 * (BW before B). compute < 0 marks a type that is skipped. */
static const struct {
    const char *name;
    int kind;
} act_types[] = {
    {"SEND_F", COMM_SEND_F}, {"RECV_F", COMM_RECV_F}, {"SEND_B", COMM_SEND_B},
    {"RECV_B", COMM_RECV_B}, {"UNSHARD", -1}, {"RESHARD", -1}, {"REDUCE_GRAD", -1},
    {"BW", ACT_BW}, {"F", ACT_F}, {"I", ACT_I}, {"B", ACT_B}, {"W", ACT_W},
};

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
    Act *comms;      /* SEND_F/RECV_F/SEND_B/RECV_B actions, file order; kind = -10 - k */
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
        size_t k = strlen(act_types[t].name);
        if (n - i >= k && memcmp(c + i, act_types[t].name, k) == 0) {
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
    if (kind <= COMM_SEND_F && !in_overlap && i > mb_at) {
        Act a = {(uint32_t)stage, (uint32_t)mb, rank, (uint32_t)(-10 - kind),
                 (uint32_t)r->ncomms, at(r, off)};
        VEC_PUSH(r->comms, r->ncomms, r->comm_cap, a);
        return;
    }
    if (kind < 0) {
        if (in_overlap)
            diag_error(r->d, at(r, off), DIAG_SYNTAX,
                       "bad action '%.*s': only compute actions (F, I, B, W) can overlap",
                       cw, cell);
        return; /* communication and sharding actions: skipped */
    }
    if (i == mb_at) {
        diag_error(r->d, at(r, off + (uint32_t)i), DIAG_SYNTAX,
                   "bad action '%.*s': a compute action needs a micro-batch index, as in 2F0",
                   cw, cell);
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
    size_t start = 1, nsub = 0;
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

/* Orders actions by (stage, micro-batch, kind, position in the file). */
static int cmp_act(const void *a, const void *b)
{
    const Act *x = a, *y = b;
    if (x->stage != y->stage)
        return x->stage < y->stage ? -1 : 1;
    if (x->mb != y->mb)
        return x->mb < y->mb ? -1 : 1;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
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
    qsort(sorted, r->nacts, sizeof *sorted, cmp_act);
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

/* "2SEND_F0"-style text of comm action a. */
static char *comm_name(char *buf, size_t n, const Act *a)
{
    snprintf(buf, n, "%u%s%u", a->stage, comm_spelling[a->kind], a->mb);
    return buf;
}

/* Phase 2b, on one rank: a RECV_F of (stage, mb) comes before the F it feeds and a
 * SEND_F after the F that produces it; RECV_B and SEND_B likewise around the backward
 * (B, I or BW) of the same stage and micro-batch. File offsets give the order within a
 * row. A comm action without that compute action is left to the pairing check. */
static void check_comm_order(Reader *r)
{
    char b1[48], b2[48];
    Act *sorted = xmalloc((r->nacts + 1) * sizeof *sorted);
    if (r->nacts)
        memcpy(sorted, r->acts, r->nacts * sizeof *sorted);
    qsort(sorted, r->nacts, sizeof *sorted, cmp_act);
    for (size_t i = 0; i < r->ncomms; i++) {
        const Act *c = &r->comms[i];
        bool fwd = c->kind < 2, send = (c->kind & 1) == 0;
        size_t lo = 0, hi = r->nacts; /* first act not below (stage, mb) */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            const Act *m = &sorted[mid];
            if (m->stage < c->stage || (m->stage == c->stage && m->mb < c->mb))
                lo = mid + 1;
            else
                hi = mid;
        }
        const Act *compute = NULL;
        for (size_t k = lo;
             k < r->nacts && sorted[k].stage == c->stage && sorted[k].mb == c->mb; k++) {
            const Act *a = &sorted[k];
            bool feeds = fwd ? a->kind == ACT_F : a->kind != ACT_F && a->kind != ACT_W;
            if (a->rank == c->rank && feeds) {
                compute = a;
                break;
            }
        }
        if (!compute)
            continue;
        if (send && compute->loc.off > c->loc.off) {
            diag_error(r->d, c->loc, DIAG_ORDER,
                       "%s comes before %s, which produces what it sends",
                       comm_name(b1, sizeof b1, c),
                       act_name(b2, sizeof b2, compute->stage, (int)compute->kind, compute->mb));
            diag_note(r->d, compute->loc, "%s is here", b2);
        } else if (!send && compute->loc.off < c->loc.off) {
            diag_error(r->d, c->loc, DIAG_ORDER,
                       "%s comes after %s, which consumes what it receives",
                       comm_name(b1, sizeof b1, c),
                       act_name(b2, sizeof b2, compute->stage, (int)compute->kind, compute->mb));
            diag_note(r->d, compute->loc, "%s is here", b2);
        }
    }
    free(sorted);
}

/* Phase 2b, after the pairing check passed: runs the ranks' comm actions with blocking
 * (rendezvous) sends, as a SEND and its RECV complete together; compute never blocks.
 * When no rank can move and some have actions left, the schedule deadlocks: reported at
 * the first stuck rank's action, naming what its peer waits in. peer[i] is comms[i]'s
 * other rank. */
static void check_comm_deadlock(Reader *r, const uint32_t *peer)
{
    uint32_t P = r->nrows;
    size_t *head = xmalloc((P + 1) * sizeof *head), *end = xmalloc((P + 1) * sizeof *end);
    for (uint32_t k = 0; k < P; k++)
        head[k] = end[k] = r->ncomms;
    for (size_t i = 0; i < r->ncomms; i++) { /* a rank's actions are contiguous */
        uint32_t k = r->comms[i].rank;
        if (head[k] == r->ncomms)
            head[k] = i;
        end[k] = i + 1;
    }
    for (bool moved = true; moved;) {
        moved = false;
        for (uint32_t k = 0; k < P; k++) {
            if (head[k] >= end[k])
                continue;
            uint32_t o = peer[head[k]];
            if (o == k) { /* a rank sending to itself does not wait */
                head[k]++, moved = true;
                continue;
            }
            if (head[o] < end[o] && peer[head[o]] == k &&
                (r->comms[head[o]].kind & 1) != (r->comms[head[k]].kind & 1)) {
                head[k]++, head[o]++, moved = true;
            }
        }
    }
    for (uint32_t k = 0; k < P; k++) {
        if (head[k] >= end[k])
            continue;
        char b1[48], b2[48];
        const Act *c = &r->comms[head[k]];
        uint32_t o = peer[head[k]];
        if (head[o] < end[o]) {
            diag_error(r->d, c->loc, DIAG_DEADLOCK,
                       "%s on rank %u waits for rank %u, which waits in %s: with blocking "
                       "sends neither can go on", comm_name(b1, sizeof b1, c), k, o,
                       comm_name(b2, sizeof b2, &r->comms[head[o]]));
            diag_note(r->d, r->comms[head[o]].loc, "%s is here", b2);
        } else {
            diag_error(r->d, c->loc, DIAG_DEADLOCK,
                       "%s on rank %u waits for rank %u, which has no comm action left",
                       comm_name(b1, sizeof b1, c), k, o);
        }
        break;
    }
    free(head);
    free(end);
}

/* Phase 2b: the comms form's point-to-point actions pair up as NCCL pairs them. A
 * SEND_F of stage s goes to the owner of stage s+1 and is received there as RECV_F of
 * stage s+1 (RECV names the receiving stage, as PyTorch's _add_send_recv writes it); a
 * SEND_B of stage s goes to stage s-1 as RECV_B of s-1. Per ordered pair of ranks the
 * n-th SEND must meet the n-th RECV with the same micro-batch and the matching type and
 * stage; a SEND or RECV left over has no partner. own[S] is the stage -> rank map. */
static void check_comms(Reader *r, const Owner *own, uint32_t S)
{
    Diag *d = r->d;
    uint32_t P = r->nrows;
    char b1[48], b2[48];
    int nerr0 = d->nerr;
    uint32_t *peer = xmalloc((r->ncomms + 1) * sizeof *peer);
    for (size_t i = 0; i < r->ncomms; i++) { /* the other rank, or P when there is none */
        const Act *a = &r->comms[i];
        bool fwd = a->kind == 0 || a->kind == 1, send = a->kind == 0 || a->kind == 2;
        /* the stage on the other side: a SEND_F's is s+1, a RECV_F's s-1, and so on */
        int64_t other = (int64_t)a->stage + ((fwd == send) ? 1 : -1);
        peer[i] = P;
        if (a->stage >= S || own[a->stage].rank != a->rank)
            diag_error(d, a->loc, DIAG_PLACEMENT, "%s is on rank %u, which does not hold stage %u",
                       comm_name(b1, sizeof b1, a), a->rank, a->stage);
        else if (other < 0 || other >= (int64_t)S)
            diag_error(d, a->loc, DIAG_MISSING, "%s has no %s stage to %s",
                       comm_name(b1, sizeof b1, a), (fwd == send) ? "next" : "previous",
                       send ? "send to" : "receive from");
        else
            peer[i] = own[other].rank;
    }
    if (d->nerr != nerr0)
        goto out;
    check_comm_order(r);
    for (uint32_t src = 0; src < P; src++) {
        for (uint32_t dst = 0; dst < P; dst++) {
            size_t si = 0, ri = 0;
            for (;;) {
                while (si < r->ncomms && !(r->comms[si].rank == src && peer[si] == dst &&
                                           (r->comms[si].kind & 1) == 0))
                    si++;
                while (ri < r->ncomms && !(r->comms[ri].rank == dst && peer[ri] == src &&
                                           (r->comms[ri].kind & 1) == 1))
                    ri++;
                if (si == r->ncomms && ri == r->ncomms)
                    break;
                const Act *s = si < r->ncomms ? &r->comms[si] : NULL;
                const Act *v = ri < r->ncomms ? &r->comms[ri] : NULL;
                if (!v) {
                    diag_error(d, s->loc, DIAG_MISSING,
                               "%s on rank %u has no matching %u%s%u on rank %u",
                               comm_name(b1, sizeof b1, s), src,
                               s->kind == 0 ? s->stage + 1 : s->stage - 1,
                               comm_spelling[s->kind + 1], s->mb, dst);
                    break;
                }
                if (!s) {
                    diag_error(d, v->loc, DIAG_MISSING,
                               "%s on rank %u has no matching %u%s%u on rank %u",
                               comm_name(b1, sizeof b1, v), dst,
                               v->kind == 1 ? v->stage - 1 : v->stage + 1,
                               comm_spelling[v->kind - 1], v->mb, src);
                    break;
                }
                uint32_t want = s->kind == 0 ? s->stage + 1 : s->stage - 1;
                if (v->kind != s->kind + 1 || v->stage != want || v->mb != s->mb) {
                    diag_error(d, v->loc, DIAG_ORDER,
                               "%s on rank %u is matched with %s from rank %u: it is rank "
                               "%u's next receive from rank %u and that is rank %u's next "
                               "send to rank %u, so NCCL pairs them; expected %u%s%u",
                               comm_name(b1, sizeof b1, v), dst, comm_name(b2, sizeof b2, s),
                               src, dst, src, src, dst, want, comm_spelling[s->kind + 1],
                               s->mb);
                    diag_note(d, s->loc, "%s is here", comm_name(b2, sizeof b2, s));
                    break;
                }
                si++, ri++;
            }
        }
    }
    if (d->nerr == nerr0)
        check_comm_deadlock(r, peer);
out:
    free(peer);
}

/* Phase 3: the pipeline of shape (P, M, V) with r->acts as its ops, in file order, and
 * the CSV's placeholder costs. */
static Pipeline *make_pipeline(const Reader *r, const char *name, uint32_t P, uint32_t M,
                               uint32_t V, bool vshape)
{
    Loc top = at(r, 0);
    Pipeline *p = pipeline_new();
    p->name = xstrdup(name);
    p->loc = top;
    pipeline_set_shape(p, (int32_t)P, (int32_t)M, (int32_t)V);
    p->placement = vshape ? PLACE_VSHAPE : PLACE_INTERLEAVED;
    bool has_w = false;
    for (size_t i = 0; i < r->nacts; i++) {
        const Act *a = &r->acts[i];
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
        check_comms(r, own, (uint32_t)nown);
        if (d->nerr == nerr0)
            p = make_pipeline(r, name, P, maxmb + 1, V, vshape);
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

uint64_t csv_export(Diag *d, const Pipeline *p, CsvFormat fmt, StrBuf *out)
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

    uint64_t dropped = 0;
    bool warned[OP_NKINDS] = {false};
    for (int32_t s = 0; s < p->P; s++) {
        bool first = true;
        for (uint32_t i = 0; i < p->stages[s].n; i++) {
            const Op *o = &p->stages[s].ops[i];
            uint32_t v = (uint32_t)ir_vstage(p, s, o->chunk);
            const char *kind;
            switch (o->kind) {
            case OP_F:
                kind = "F";
                break;
            case OP_B: {
                uint64_t key = (uint64_t)v << 32 | o->mb;
                bool split = nw && bsearch(&key, wkeys, nw, sizeof *wkeys, cmp_u64);
                if (fmt == CSV_LEGACY)
                    kind = split ? "B" : "BW";
                else
                    kind = split ? "I" : "B";
                break;
            }
            case OP_W:
                kind = "W";
                break;
            default:
                dropped++;
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
            if (!first)
                sb_putc(out, ',');
            sb_printf(out, "%u%s%u", v, kind, o->mb);
            first = false;
        }
        sb_putc(out, '\n');
    }
    if (p->ndeps)
        diag_warning(d, p->deps[0].loc, WARN_CSV,
                     "the schedule's %u dep edge%s cannot be written to a PyTorch CSV and %s "
                     "left out", p->ndeps, p->ndeps == 1 ? "" : "s",
                     p->ndeps == 1 ? "is" : "are");
    free(wkeys);
    return dropped;
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
