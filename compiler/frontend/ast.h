/* ast.h - the syntax tree of a .pipe file, built by grammar/pipe.y and consumed only by
 * elaborate.c (nothing downstream of elaboration sees it).
 *
 * Every node lives in one Arena owned by the load (AstCtx), so a parse that stops half
 * way, or error recovery that drops subtrees, cannot leak: the arena is freed at once.
 * Identifiers and strings are interned in the same context, so two names are equal iff
 * their pointers are equal. Lists (items, fields, arguments) are chained through
 * Node.next. Locations are byte offsets into one registered source file (diag.h). */
#ifndef PIPEC_AST_H
#define PIPEC_AST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"

/* Node kinds. X(enum suffix, description used in diagnostics). The fields each kind
 * uses are listed beside it. */
#define NODE_KINDS(X) \
    /* expressions */ \
    X(NUM, "number")              /* num */ \
    X(VAR, "name")                /* name */ \
    X(BINOP, "operator")          /* op = BinOp, a, b */ \
    X(UNOP, "operator")           /* op = '-' or '!', a */ \
    X(CALL, "call")               /* name (min, max), a = argument list */ \
    /* statements (pipeline and template bodies) */ \
    X(LET, "let")                 /* name, a = value */ \
    X(FOR, "for")                 /* name, a = lo, b = hi, op = RANGE_INCLUSIVE for ..=, body */ \
    X(IF, "if")                   /* a = condition, body = then, c = else items (or NULL) */ \
    X(STAGE, "stage")             /* a = rank, body */ \
    X(OPS, "ops")                 /* u.run.ops[nops]: a run of literal ops (AstOp) */ \
    X(OPCALL, "op")               /* op = OpKind, name (as written), a = argument list */ \
    X(DEP, "dep")                 /* a = from rank, b = from op, c = to rank, d = to op */ \
    X(REQUIRE, "require")         /* a = condition, name = the message (a string) */ \
    /* pipeline settings */ \
    X(STAGES, "stages")           /* a = expr */ \
    X(MICROBATCHES, "microbatches") /* a = expr */ \
    X(CHUNKS, "chunks")           /* a = expr, op = CHUNKS_UNPLACED or a Placement */ \
    X(MEMORY, "memory")           /* a = NUM */ \
    X(COSTS, "costs")             /* op = CostsScope, a = index expr, body = FIELDs */ \
    X(MODEL, "model")             /* name, op = HAS_OVERRIDE with a block, body = FIELDs */ \
    X(DEVICE, "device")           /* name, op = HAS_OVERRIDE with a block, body = FIELDs */ \
    X(PARTITION, "partition")     /* op = PARTITION_EVEN, else body = NUM list */ \
    X(TP, "tensor_parallel")      /* a = expr */ \
    X(DP, "data_parallel")        /* a = expr */ \
    X(ZERO, "zero")               /* a = expr */ \
    X(GRAD_DTYPE, "grad_dtype")   /* name */ \
    X(EP, "expert_parallel")      /* a = expr */ \
    X(SCHEDULE, "schedule")       /* name */ \
    X(RECOMPUTE, "recompute")     /* a = value (range, number or `all`), b = policy VIDENT, body = its arguments */ \
    X(APPLY, "apply")             /* one pass call: name, body = FIELDs */ \
    /* values in model/device/costs blocks and pass arguments */ \
    X(FIELD, "field")             /* name = key, a = value */ \
    X(VIDENT, "name")             /* name */ \
    X(VSTR, "string")             /* name = the string's contents */ \
    X(VRANGE, "range")            /* a = lo NUM, b = hi NUM, op = RANGE_INCLUSIVE for ..= */ \
    X(VLIST, "list")              /* body = NUM list */ \
    /* file level */ \
    X(IMPORT, "import")           /* name = path as written */ \
    X(TEMPLATE, "template")       /* name, body */ \
    X(MODELDEF, "model")          /* name, body = FIELDs */ \
    X(DEVICEDEF, "device")        /* name, body = FIELDs */ \
    X(PIPELINE, "pipeline")       /* name, body */

typedef enum NodeKind {
#define X(e, s) N_##e,
    NODE_KINDS(X)
#undef X
    N_NKINDS
} NodeKind;

extern const char *const node_kind_name[N_NKINDS];

typedef enum BinOp {
    BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_MOD,
    BIN_LT, BIN_LE, BIN_GT, BIN_GE, BIN_EQ, BIN_NE,
    BIN_AND, BIN_OR
} BinOp;

typedef enum CostsScope { COSTS_ALL, COSTS_STAGE, COSTS_VSTAGE } CostsScope;

/* Node.op of the kinds where it is a flag (NODE_KINDS says which kind uses which). */
enum {
    RANGE_INCLUSIVE = 1,  /* N_FOR, N_VRANGE: written with `..=` */
    HAS_OVERRIDE = 1,     /* N_MODEL, N_DEVICE: an override block follows the name */
    PARTITION_EVEN = 1,   /* N_PARTITION: `partition even` */
    CHUNKS_UNPLACED = -1, /* N_CHUNKS: no placement keyword (else a Placement) */
};

/* A number as written: value, whether it is a plain integer, and its unit suffix. */
typedef struct Num {
    double val;        /* the value without the unit applied (so 1.5 for 1.5ms) */
    int64_t ival;      /* exact value when is_int */
    bool is_int;       /* digits only, no '.', no exponent, fits int64 */
    bool range_err;    /* too large for int64 (if integral) or for a double */
    const char *unit;  /* interned suffix ("ms", "GiB", "GB/s") or NULL */
} Num;

/* A literal op as written (`F3`, `B3.1`, `SO0.2`). The micro-batch and chunk are kept
 * wider than the IR's Op (uint32_t, uint8_t) until elaboration checks them against M
 * and V, so `F0.300` is reported as chunk 300. A number too large even for these
 * fields saturates (mb at UINT64_MAX, chunk at UINT16_MAX); the message then quotes
 * the digits from the source. 16 bytes, like Op: the file is the run node's. */
typedef struct AstOp {
    uint64_t mb;       /* micro-batch as written, saturated at UINT64_MAX */
    uint32_t off;      /* byte offset of the op in the run node's file */
    uint16_t chunk;    /* chunk as written (0 when absent), saturated at UINT16_MAX */
    uint8_t kind;      /* OpKind */
    uint8_t unused;
} AstOp;

typedef struct Node Node;
struct Node {
    uint8_t kind;      /* NodeKind */
    int8_t op;         /* per kind, see NODE_KINDS */
    uint16_t depth;    /* expression depth (1 for a leaf) */
    uint32_t nops;     /* N_OPS: ops[] entries */
    Loc loc;
    uint32_t end;      /* N_TEMPLATE: the byte offset just past its closing brace (its a:
                        * the N_CHUNKS of a header `template NAME chunks N [placement]`) */
    Node *next;        /* next item of the enclosing list */
    const char *name;  /* interned */
    Node *a, *b, *c, *d;
    Node *body;        /* first item of a nested list */
    union {
        Num num;       /* N_NUM */
        struct {       /* N_OPS: a growable run of literal ops (offset per op) */
            AstOp *ops;
            uint32_t cap;
        } run;
    } u;
};

/* A head/tail pair for building lists in order in the parser. */
typedef struct NodeList {
    Node *head, *tail;
} NodeList;

/* The parse of one file. */
typedef struct AstFile {
    uint32_t file;     /* Diag file index */
    Node *items;       /* IMPORT, TEMPLATE, MODELDEF, DEVICEDEF, PIPELINE */
    bool ok;           /* no syntax errors */
} AstFile;

/* Arena, interned names and the files of one load. */
typedef struct ArenaBlock ArenaBlock;
typedef struct AstCtx {
    ArenaBlock *blocks;
    Node **runs;            /* OPS nodes whose op arrays are malloc'd */
    size_t nruns, runcap;
    const char **itab;      /* intern hash table (open addressing) */
    size_t icap, icount;
} AstCtx;

void ast_init(AstCtx *c);
/* Frees every node, name and op run of the context. */
void ast_free(AstCtx *c);
/* Zeroed memory from the context's arena, 16-byte aligned. */
void *ast_alloc(AstCtx *c, size_t n);
/* The unique copy of s[0..n). */
const char *ast_intern(AstCtx *c, const char *s, size_t n);

/* Node constructors used by the grammar. Each returns a node in the arena. */
Node *ast_node(AstCtx *c, NodeKind k, Loc loc);
/* Appends a literal op of file `file` to the list: joins it to a trailing OPS run when
 * there is one. */
void ast_push_op(AstCtx *c, NodeList *l, AstOp op, uint32_t file);
void ast_list_push(NodeList *l, Node *n);

/* The expression depth of a new node with children a and b (either may be NULL). */
int ast_depth(const Node *a, const Node *b);

/* Parses file index `file` of d (already registered) into *out. Syntax errors are
 * reported through d; out->ok is false when there were any. Nodes live in c. */
void ast_parse(Diag *d, AstCtx *c, uint32_t file, AstFile *out);

/* Parses file index `file` of d as a pass list, `name(k=v, ...), name, ...` (the text
 * of `pipec opt --pass`), by the grammar's rules for `apply`. Returns the N_APPLY
 * nodes, chained, or NULL after `syntax` errors. */
Node *ast_parse_pass_list(Diag *d, AstCtx *c, uint32_t file);

/* Parses file index `file` of d, the text `KEY=VALUE` of a `--set`, as one pipeline
 * setting by the grammar's rules for a setting line: the key is text[0..key_end), the
 * value the bytes [lo, hi); every other byte (the '=', other values of a sweep) reads
 * as a blank, so locations are columns of the whole text. Returns the setting node
 * (for `apply`, the chained N_APPLY calls), or NULL after `syntax` errors. */
Node *ast_parse_setting(Diag *d, AstCtx *c, uint32_t file, uint32_t key_end, uint32_t lo,
                        uint32_t hi);

/* True for the node kinds that are pipeline settings (the lines `--set` can override):
 * the kinds from N_STAGES to N_APPLY of NODE_KINDS, whose names are their keywords. */
static inline bool ast_is_setting(NodeKind k)
{
    return k >= N_STAGES && k <= N_APPLY;
}

/* A whole program: the parsed files (the main one first) and its one pipeline. */
typedef struct Program {
    AstFile *files;
    uint32_t nfiles;
    Node *pipeline;    /* the main file's pipeline (NULL when absent) */
    AstCtx *ctx;
} Program;

/* Elaborates the program's pipeline into the IR (elaborate.c): settings, costs,
 * model/device resolution against the MODELDEF/DEVICEDEF of every file, template
 * expansion, stage bodies and deps. Returns NULL when it reported errors. */
Pipeline *elaborate(Diag *d, const Program *prog);

#endif
