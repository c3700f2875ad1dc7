/* pipe.y - the grammar of the .pipe language (docs/language.md has it in EBNF).
 *
 * A pure bison parser with locations and no conflicts. Each action is one constructor
 * call into the AST (ast.h). Every node lives in the load's arena, so error recovery
 * that drops values cannot leak and no %destructor is needed: the values on the stack
 * are arena pointers, interned names and plain structs.
 *
 * The same item list serves pipeline bodies, template bodies and the bodies of stage,
 * for and if; elaborate.c says which items are allowed where (settings only at the top
 * of a pipeline, ops only inside a stage). Errors recover at the enclosing block's '}'
 * and at file level at the next definition.
 *
 * A second start symbol reads a pass list, the text of `pipec opt --pass`, with the
 * rule `apply` uses (`passes`): the scanner returns PASS_LIST first when asked to
 * (ast_parse_pass_list), so --pass and `apply` accept exactly the same texts. A pass
 * list has no error recovery: its first error ends the parse.
 *
 * A third start symbol reads one pipeline setting, the VALUE of `--set KEY=VALUE`
 * (docs/language.md "Overriding settings"): the scanner returns SETTING first and reads
 * a copy of the text in which the '=' is a blank (ast_parse_setting), so an override is
 * exactly a setting line of the file and new settings need nothing here. */

%code requires {
#include <stdbool.h>
#include <stdint.h>
#include "ast.h"

/* A token's or a rule's source span: byte offsets [off, end) in the file. */
typedef struct PipeLoc {
    uint32_t off, end;
} PipeLoc;

/* The state of one file's parse, shared by the scanner and the parser. */
typedef struct PipeParse {
    Diag *d;
    AstCtx *c;
    uint32_t file;          /* Diag file index */
    uint32_t off;           /* scanner position, bytes */
    bool aborted;           /* a limit stopped the parse; nothing more is reported */
    const char *pending_kw; /* the last block keyword, for "unterminated 'stage' block" */
    int last_tok;
    uint32_t tok_end;       /* where the last token ended */
    uint32_t word_off, word_end; /* the last identifier or keyword, for "did you mean" */
    struct { uint32_t off; const char *kw; char ch; } *open; /* open brackets */
    int nopen, opencap;
    bool eof_reported;      /* an "unexpected end of file" was reported */
    bool pass_list;         /* the text is a pass list (`pipec opt --pass`), not a file */
    bool setting;           /* the text is one setting (`--set KEY=VALUE`), not a file */
    bool started;           /* the scanner returned PASS_LIST or SETTING */
    Node *items;            /* the result */
} PipeParse;
}

%code provides {
int pipe_yylex(PIPE_YYSTYPE *lval, PIPE_YYLTYPE *lloc, void *scanner);
}

%code {
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "util.h"

#define YYLLOC_DEFAULT(Cur, Rhs, N)                         \
    do {                                                    \
        if (N) {                                            \
            (Cur).off = YYRHSLOC(Rhs, 1).off;               \
            (Cur).end = YYRHSLOC(Rhs, N).end;               \
        } else {                                            \
            (Cur).off = (Cur).end = YYRHSLOC(Rhs, 0).end;   \
        }                                                   \
    } while (0)

#define L(l) ((Loc){(l).off, ps->file})

static void pipe_yyerror(PIPE_YYLTYPE *loc, void *scanner, PipeParse *ps, const char *msg);
static Node *mk(PipeParse *ps, NodeKind k, PipeLoc l) { return ast_node(ps->c, k, L(l)); }
static Node *mk_name(PipeParse *ps, NodeKind k, PipeLoc l, const char *name);
static Node *mk_expr(PipeParse *ps, NodeKind k, int op, PipeLoc l, Node *a, Node *b);
static Node *mk_num(PipeParse *ps, PipeLoc l, Num n, bool neg);
static void note_require(PipeParse *ps, PipeLoc l);
/* The keyword closest to the n bytes at s by edit distance, or NULL (pipe.l). */
const char *pipe_keyword_closest(const char *s, size_t n);
static NodeList one(Node *n) { NodeList l = {0, 0}; ast_list_push(&l, n); return l; }
static NodeList push(NodeList l, Node *n) { ast_list_push(&l, n); return l; }
/* l followed by t (a list already chained). */
static NodeList append(NodeList l, NodeList t)
{
    if (!t.head)
        return l;
    if (l.tail)
        l.tail->next = t.head;
    else
        l.head = t.head;
    l.tail = t.tail;
    return l;
}
}

%define api.pure full
%define api.prefix {pipe_yy}
%define api.location.type {PipeLoc}
%define parse.error custom
%locations
%expect 0
%lex-param {void *scanner}
%parse-param {void *scanner} {PipeParse *ps}

%union {
    const char *str;
    Num num;
    AstOp op;
    Node *node;
    NodeList list;
}

%token END 0 "end of file"
%token <str> IDENT "identifier"
%token <str> STRING "string"
%token <num> NUM "number"
%token <op> OPTOK "op"
%token <op> ACTTOK "action"
%token INVALID "invalid character"
%token <str> PIPELINE "'pipeline'" TEMPLATE "'template'" IMPORT "'import'" MODEL "'model'"
%token <str> DEVICE "'device'" STAGES "'stages'" MICROBATCHES "'microbatches'"
%token <str> CHUNKS "'chunks'" INTERLEAVED "'interleaved'" VSHAPE "'vshape'"
%token <str> MEMORY "'memory'" COSTS "'costs'" STAGE "'stage'" VSTAGE "'vstage'"
%token <str> DEP "'dep'" PARTITION "'partition'" EVEN "'even'"
%token <str> TENSOR_PARALLEL "'tensor_parallel'" SCHEDULE "'schedule'"
%token <str> DATA_PARALLEL "'data_parallel'" ZERO "'zero'" GRAD_DTYPE "'grad_dtype'"
%token <str> EXPERT_PARALLEL "'expert_parallel'"
%token <str> RECOMPUTE "'recompute'" POLICY "'policy'" APPLY "'apply'" LET "'let'"
%token <str> GRANULARITY "'granularity'"
%token <str> FOR "'for'" IN "'in'" IF "'if'" REQUIRE "'require'" ELSE "'else'"
%token DOTDOT "'..'" DOTDOTEQ "'..='" ARROW "'->'" LE "'<='" GE "'>='" EQ "'=='"
%token NE "'!='" AND "'&&'" OR "'||'"
/* Never in a file: the scanner returns it first when it reads a pass list (the text of
 * `pipec opt --pass`), which selects the second start below. */
%token PASS_LIST "pass list"
/* Never in a file either: selects the third start, one setting (`--set`). */
%token SETTING "setting"

%left OR
%left AND
%nonassoc EQ NE
%nonassoc '<' LE '>' GE
%left '+' '-'
%left '*' '/' '%'
%precedence UNARY

%type <str> name var
%type <node> topitem tchunks item ifstmt expr depop number value field kv block fblock
%type <node> pass
%type <list> topitems items args fields numlist kvs passes values

%%

/* A file, or (after PASS_LIST) a pass list: `pipec opt --pass` is read by the same
 * rules as `apply`. */
file:
  topitems             { ps->items = $1.head; }
| PASS_LIST passes     { ps->items = $2.head; }
| SETTING item         { ps->items = $2; }
| SETTING APPLY passes { ps->items = $3.head; }
;

topitems:
  %empty               { $$ = (NodeList){0, 0}; }
| topitems topitem     { $$ = push($1, $2); }
| topitems ';'         { $$ = $1; }
| topitems error       { $$ = $1; }
;

topitem:
  IMPORT STRING        { $$ = mk_name(ps, N_IMPORT, @2, $2); }
| TEMPLATE name block  { $$ = mk_name(ps, N_TEMPLATE, @2, $2); $$->body = $3; $$->end = @3.end; }
| TEMPLATE name tchunks block
                       { $$ = mk_name(ps, N_TEMPLATE, @2, $2); $$->a = $3; $$->body = $4;
                         $$->end = @4.end; }
| MODEL name fblock    { $$ = mk_name(ps, N_MODELDEF, @2, $2); $$->body = $3; }
| DEVICE name fblock   { $$ = mk_name(ps, N_DEVICEDEF, @2, $2); $$->body = $3; }
| PIPELINE name block  { $$ = mk_name(ps, N_PIPELINE, @2, $2); $$->body = $3; }
;

/* A template's header `chunks N [interleaved | vshape]`: the shape it is defined for. */
tchunks:
  CHUNKS expr          { $$ = mk(ps, N_CHUNKS, @1); $$->a = $2; $$->op = CHUNKS_UNPLACED; }
| CHUNKS expr INTERLEAVED { $$ = mk(ps, N_CHUNKS, @1); $$->a = $2; $$->op = PLACE_INTERLEAVED; }
| CHUNKS expr VSHAPE   { $$ = mk(ps, N_CHUNKS, @1); $$->a = $2; $$->op = PLACE_VSHAPE; }
;

/* A name: an identifier or any keyword. */
name:
  IDENT | PIPELINE | TEMPLATE | IMPORT | MODEL | DEVICE | STAGES | MICROBATCHES
| CHUNKS | INTERLEAVED | VSHAPE | MEMORY | COSTS | STAGE | VSTAGE | DEP | PARTITION
| EVEN | TENSOR_PARALLEL | SCHEDULE | RECOMPUTE | POLICY | APPLY | LET | FOR | IN
| IF | REQUIRE | ELSE | DATA_PARALLEL | ZERO | GRAD_DTYPE | EXPERT_PARALLEL | GRANULARITY
;

/* A template variable: an identifier, or `zero`, a keyword (the ZeRO stage setting) that
 * files used as a variable before it was one. */
var:
  IDENT | ZERO
;

block:
  '{' items '}'        { $$ = $2.head; }
| '{' items error '}'  { $$ = $2.head; }
;

items:
  %empty               { $$ = (NodeList){0, 0}; }
| items item           { $$ = push($1, $2); }
| items OPTOK          { $$ = $1; ast_push_op(ps->c, &$$, $2, ps->file); }
| items ACTTOK         { $$ = $1; ast_push_op(ps->c, &$$, $2, ps->file); }
| items APPLY passes   { $$ = append($1, $3); }
| items ';'            { $$ = $1; }
;

item:
  LET var '=' expr     { $$ = mk_name(ps, N_LET, @2, $2); $$->a = $4; }
| FOR var IN expr DOTDOT expr block
                       { $$ = mk_name(ps, N_FOR, @2, $2); $$->a = $4; $$->b = $6; $$->body = $7; }
| FOR var IN expr DOTDOTEQ expr block
                       { $$ = mk_name(ps, N_FOR, @2, $2); $$->a = $4; $$->b = $6; $$->body = $7; $$->op = RANGE_INCLUSIVE; }
| ifstmt
| REQUIRE expr STRING  { $$ = mk_name(ps, N_REQUIRE, @1, $3); $$->a = $2; }
| REQUIRE error        { $$ = NULL; note_require(ps, @1); }
| STAGE expr block     { $$ = mk(ps, N_STAGE, @1); $$->a = $2; $$->body = $3; }
| IDENT '(' args ')'   { $$ = mk_name(ps, N_OPCALL, @1, $1); $$->a = $3.head; }
| DEP expr ':' depop ARROW expr ':' depop
                       { $$ = mk(ps, N_DEP, @1); $$->a = $2; $$->b = $4; $$->c = $6; $$->d = $8; }
| STAGES expr          { $$ = mk(ps, N_STAGES, @1); $$->a = $2; }
| MICROBATCHES expr    { $$ = mk(ps, N_MICROBATCHES, @1); $$->a = $2; }
| CHUNKS expr          { $$ = mk(ps, N_CHUNKS, @1); $$->a = $2; $$->op = CHUNKS_UNPLACED; }
| CHUNKS expr INTERLEAVED { $$ = mk(ps, N_CHUNKS, @1); $$->a = $2; $$->op = PLACE_INTERLEAVED; }
| CHUNKS expr VSHAPE   { $$ = mk(ps, N_CHUNKS, @1); $$->a = $2; $$->op = PLACE_VSHAPE; }
| MEMORY number        { $$ = mk(ps, N_MEMORY, @1); $$->a = $2; }
| COSTS fblock         { $$ = mk(ps, N_COSTS, @1); $$->op = COSTS_ALL; $$->body = $2; }
| COSTS STAGE expr fblock
                       { $$ = mk(ps, N_COSTS, @1); $$->op = COSTS_STAGE; $$->a = $3; $$->body = $4; }
| COSTS VSTAGE expr fblock
                       { $$ = mk(ps, N_COSTS, @1); $$->op = COSTS_VSTAGE; $$->a = $3; $$->body = $4; }
| MODEL name           { $$ = mk_name(ps, N_MODEL, @2, $2); }
| MODEL name fblock    { $$ = mk_name(ps, N_MODEL, @2, $2); $$->op = HAS_OVERRIDE; $$->body = $3; }
| DEVICE name          { $$ = mk_name(ps, N_DEVICE, @2, $2); }
| DEVICE name fblock   { $$ = mk_name(ps, N_DEVICE, @2, $2); $$->op = HAS_OVERRIDE; $$->body = $3; }
| PARTITION EVEN       { $$ = mk(ps, N_PARTITION, @1); $$->op = PARTITION_EVEN; }
| PARTITION '[' numlist ']'
                       { $$ = mk(ps, N_PARTITION, @1); $$->body = $3.head; }
| TENSOR_PARALLEL expr { $$ = mk(ps, N_TP, @1); $$->a = $2; }
| DATA_PARALLEL expr   { $$ = mk(ps, N_DP, @1); $$->a = $2; }
| EXPERT_PARALLEL expr { $$ = mk(ps, N_EP, @1); $$->a = $2; }
| ZERO expr            { $$ = mk(ps, N_ZERO, @1); $$->a = $2; }
| GRAD_DTYPE name      { $$ = mk_name(ps, N_GRAD_DTYPE, @2, $2); }
| SCHEDULE name        { $$ = mk_name(ps, N_SCHEDULE, @2, $2); }
| RECOMPUTE STAGES value POLICY name
                       { $$ = mk(ps, N_RECOMPUTE, @1); $$->a = $3; $$->b = mk_name(ps, N_VIDENT, @5, $5); }
| RECOMPUTE STAGES value POLICY name '(' ')'
                       { $$ = mk(ps, N_RECOMPUTE, @1); $$->a = $3; $$->b = mk_name(ps, N_VIDENT, @5, $5); }
| RECOMPUTE STAGES value POLICY name '(' values ')'
                       { $$ = mk(ps, N_RECOMPUTE, @1); $$->a = $3; $$->b = mk_name(ps, N_VIDENT, @5, $5); $$->body = $7.head; }
| RECOMPUTE STAGES value POLICY name GRANULARITY name
                       { $$ = mk(ps, N_RECOMPUTE, @1); $$->a = $3; $$->b = mk_name(ps, N_VIDENT, @5, $5); $$->c = mk_name(ps, N_VIDENT, @7, $7); }
| RECOMPUTE STAGES value POLICY name '(' ')' GRANULARITY name
                       { $$ = mk(ps, N_RECOMPUTE, @1); $$->a = $3; $$->b = mk_name(ps, N_VIDENT, @5, $5); $$->c = mk_name(ps, N_VIDENT, @9, $9); }
| RECOMPUTE STAGES value POLICY name '(' values ')' GRANULARITY name
                       { $$ = mk(ps, N_RECOMPUTE, @1); $$->a = $3; $$->b = mk_name(ps, N_VIDENT, @5, $5); $$->body = $7.head; $$->c = mk_name(ps, N_VIDENT, @10, $10); }
;

/* `apply` and `pipec opt --pass`: pass calls, `name` or `name(k=v, ...)`, comma-separated
 * (one N_APPLY each). */
passes:
  pass                 { $$ = one($1); }
| passes ',' pass      { $$ = push($1, $3); }
;

pass:
  name                 { $$ = mk_name(ps, N_APPLY, @1, $1); }
| name '(' ')'         { $$ = mk_name(ps, N_APPLY, @1, $1); }
| name '(' kvs ')'     { $$ = mk_name(ps, N_APPLY, @1, $1); $$->body = $3.head; }
;

ifstmt:
  IF expr block        { $$ = mk(ps, N_IF, @1); $$->a = $2; $$->body = $3; }
| IF expr block ELSE block
                       { $$ = mk(ps, N_IF, @1); $$->a = $2; $$->body = $3; $$->c = $5; }
| IF expr block ELSE ifstmt
                       { $$ = mk(ps, N_IF, @1); $$->a = $2; $$->body = $3; $$->c = $5; }
;

depop:
  OPTOK                { NodeList l = {0, 0}; ast_push_op(ps->c, &l, $1, ps->file); $$ = l.head; }
| IDENT '(' args ')'   { $$ = mk_name(ps, N_OPCALL, @1, $1); $$->a = $3.head; }
;

expr:
  NUM                  { $$ = mk_num(ps, @1, $1, false); }
| var                  { $$ = mk_name(ps, N_VAR, @1, $1); $$->depth = 1; }
| '(' expr ')'         { $$ = $2; }
| IDENT '(' args ')'   { $$ = mk_expr(ps, N_CALL, 0, @1, $3.head, NULL); if ($$) $$->name = $1; }
| expr '+' expr        { $$ = mk_expr(ps, N_BINOP, BIN_ADD, @2, $1, $3); }
| expr '-' expr        { $$ = mk_expr(ps, N_BINOP, BIN_SUB, @2, $1, $3); }
| expr '*' expr        { $$ = mk_expr(ps, N_BINOP, BIN_MUL, @2, $1, $3); }
| expr '/' expr        { $$ = mk_expr(ps, N_BINOP, BIN_DIV, @2, $1, $3); }
| expr '%' expr        { $$ = mk_expr(ps, N_BINOP, BIN_MOD, @2, $1, $3); }
| expr '<' expr        { $$ = mk_expr(ps, N_BINOP, BIN_LT, @2, $1, $3); }
| expr LE expr         { $$ = mk_expr(ps, N_BINOP, BIN_LE, @2, $1, $3); }
| expr '>' expr        { $$ = mk_expr(ps, N_BINOP, BIN_GT, @2, $1, $3); }
| expr GE expr         { $$ = mk_expr(ps, N_BINOP, BIN_GE, @2, $1, $3); }
| expr EQ expr         { $$ = mk_expr(ps, N_BINOP, BIN_EQ, @2, $1, $3); }
| expr NE expr         { $$ = mk_expr(ps, N_BINOP, BIN_NE, @2, $1, $3); }
| expr AND expr        { $$ = mk_expr(ps, N_BINOP, BIN_AND, @2, $1, $3); }
| expr OR expr         { $$ = mk_expr(ps, N_BINOP, BIN_OR, @2, $1, $3); }
| '-' expr %prec UNARY { $$ = mk_expr(ps, N_UNOP, '-', @1, $2, NULL); }
| '!' expr %prec UNARY { $$ = mk_expr(ps, N_UNOP, '!', @1, $2, NULL); }
;

args:
  expr                 { $$ = one($1); }
| args ',' expr        { $$ = push($1, $3); }
;

fblock:
  '{' fields '}'       { $$ = $2.head; }
| '{' fields error '}' { $$ = $2.head; }
;

fields:
  %empty               { $$ = (NodeList){0, 0}; }
| fields field         { $$ = push($1, $2); }
| fields ';'           { $$ = $1; }
;

field: name value      { $$ = mk_name(ps, N_FIELD, @1, $1); $$->a = $2; }

kvs:
  kv                   { $$ = one($1); }
| kvs ',' kv           { $$ = push($1, $3); }
;

kv: name '=' value     { $$ = mk_name(ps, N_FIELD, @1, $1); $$->a = $3; }

value:
  number
| NUM DOTDOT NUM       { $$ = mk(ps, N_VRANGE, @$); $$->a = mk_num(ps, @1, $1, false); $$->b = mk_num(ps, @3, $3, false); }
| NUM DOTDOTEQ NUM     { $$ = mk(ps, N_VRANGE, @$); $$->a = mk_num(ps, @1, $1, false); $$->b = mk_num(ps, @3, $3, false); $$->op = RANGE_INCLUSIVE; }
| name                 { $$ = mk_name(ps, N_VIDENT, @1, $1); }
| STRING               { $$ = mk_name(ps, N_VSTR, @1, $1); }
| '[' numlist ']'      { $$ = mk(ps, N_VLIST, @$); $$->body = $2.head; }
| '[' ']'              { $$ = mk(ps, N_VLIST, @$); }
;

number:
  NUM                  { $$ = mk_num(ps, @1, $1, false); }
| '-' NUM              { $$ = mk_num(ps, @$, $2, true); }
;

/* The arguments of a parameterised recompute policy: `block(3)`, `keep(qkv, fc1)`. */
values:
  value                { $$ = one($1); }
| values ',' value     { $$ = push($1, $3); }
;

numlist:
  number               { $$ = one($1); }
| numlist ',' number   { $$ = push($1, $3); }
;

%%

static Node *mk_name(PipeParse *ps, NodeKind k, PipeLoc l, const char *name)
{
    Node *n = ast_node(ps->c, k, L(l));
    n->name = name;
    return n;
}

static Node *mk_num(PipeParse *ps, PipeLoc l, Num num, bool neg)
{
    Node *n = ast_node(ps->c, N_NUM, L(l));
    if (neg) {
        num.val = -num.val;
        num.ival = -num.ival;
    }
    n->u.num = num;
    n->depth = 1;
    return n;
}

/* An expression node; reports `limit` (once) when the tree grows deeper than
 * frontend_limits.max_expr_depth, which stops the parse so that the recursive
 * evaluator never sees it. */
static Node *mk_expr(PipeParse *ps, NodeKind k, int op, PipeLoc l, Node *a, Node *b)
{
    Node *n = ast_node(ps->c, k, L(l));
    n->op = (int8_t)op;
    n->a = a;
    n->b = b;
    int depth = ast_depth(a, b);
    if (k == N_CALL)
        for (Node *x = a; x; x = x->next)
            if (x->depth + 1 > depth)
                depth = x->depth + 1;
    if (depth > frontend_limits.max_expr_depth) {
        if (!ps->aborted)
            diag_error(ps->d, L(l), DIAG_LIMIT, "expression nested deeper than %d levels",
                       frontend_limits.max_expr_depth);
        ps->aborted = true;
        depth = frontend_limits.max_expr_depth;
    }
    n->depth = (uint16_t)depth;
    return n;
}

/* Bison calls this only for stack exhaustion: deep nesting the scanner let through. */
static void pipe_yyerror(PIPE_YYLTYPE *loc, void *scanner, PipeParse *ps, const char *msg)
{
    (void)scanner;
    if (ps->aborted)
        return;
    diag_error(ps->d, L(*loc), DIAG_LIMIT, "input nested too deeply (%s)", msg);
    ps->aborted = true;
}

/* After a syntax error in a `require`: says what the statement takes. */
static void note_require(PipeParse *ps, PipeLoc l)
{
    if (!ps->aborted && !ps->eof_reported)
        diag_note(ps->d, L(l), "'require' takes a condition and a message: require COND \"message\"");
}

/* Points at the innermost '{' still open at the end of the file. */
static void note_unterminated(PipeParse *ps)
{
    for (int i = ps->nopen; i-- > 0;)
        if (ps->open[i].ch == '{') {
            Loc at = {ps->open[i].off, ps->file};
            if (ps->open[i].kw)
                diag_note(ps->d, at, "possibly unterminated '%s' block; the '{' is here", ps->open[i].kw);
            else
                diag_note(ps->d, at, "possibly unterminated block; the '{' is here");
            return;
        }
}

/* "'pipeline'" from the token table's "\"'pipeline'\"". */
static void sym_name(char *buf, size_t n, yysymbol_kind_t sym)
{
    const char *s = yysymbol_name(sym);
    size_t len = strlen(s);
    if (len >= 2 && s[0] == '"' && s[len - 1] == '"') {
        s++;
        len -= 2;
    }
    if (len >= n)
        len = n - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
}

/* True when s[0..n) is letters followed by digits, the shape of an op (`X0`, `Fw3`). */
static bool op_like(const char *s, uint32_t n)
{
    uint32_t i = 0;
    while (i < n && ((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z')))
        i++;
    if (i == 0 || i == n)
        return false;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    return i == n;
}

/* "unexpected identifier 'pipelin', expected 'import', 'template' or ';'". The list of
 * expected tokens is given when it is short; at an unexpected end of file a note points
 * at the innermost '{' still open. */
static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner, PipeParse *ps)
{
    (void)scanner;
    if (ps->aborted)
        return 0;
    yysymbol_kind_t tok = yypcontext_token(ctx);
    const PipeLoc *tl = yypcontext_location(ctx);
    if (tok == YYSYMBOL_INVALID) /* the scanner reported it */
        return 0;
    StrBuf b = {0};
    char name[64];
    sym_name(name, sizeof name, tok);
    if (tok == YYSYMBOL_YYEOF && ps->pass_list)
        snprintf(name, sizeof name, "end of the pass list");
    if (tok == YYSYMBOL_YYEOF && ps->setting)
        snprintf(name, sizeof name, "end of the --set value");
    sb_printf(&b, "unexpected %s", name);
    if (tok == YYSYMBOL_IDENT || tok == YYSYMBOL_NUM || tok == YYSYMBOL_OPTOK || tok == YYSYMBOL_STRING) {
        const SrcFile *f = &ps->d->files[ps->file];
        uint32_t len = tl->end - tl->off;
        if (tl->end <= f->len)
            sb_printf(&b, " %s%.*s%s", tok == YYSYMBOL_STRING ? "" : "'", len > 40 ? 40 : (int)len,
                      f->text + tl->off, len > 40 ? "..." : tok == YYSYMBOL_STRING ? "" : "'");
    }
    /* The expected tokens, without ';' (always optional) and with "any keyword or
     * identifier" said as "name"; listed only when few. */
    yysymbol_kind_t exp[YYNTOKENS];
    int nexp = yypcontext_expected_tokens(ctx, exp, YYNTOKENS), nkw = 0;
    bool ident = false;
    for (int i = 0; i < nexp; i++) {
        ident |= exp[i] == YYSYMBOL_IDENT;
        nkw += exp[i] >= YYSYMBOL_PIPELINE && exp[i] <= YYSYMBOL_ELSE;
    }
    bool any_name = ident && nkw == YYSYMBOL_ELSE - YYSYMBOL_PIPELINE + 1;
    const char *shown[8];
    int nshown = 0;
    for (int i = 0; i < nexp && nshown <= 6; i++) {
        if (exp[i] == YYSYMBOL_YYerror || exp[i] == YYSYMBOL_PASS_LIST || exp[i] == YYSYMBOL_SETTING ||
            strcmp(yysymbol_name(exp[i]), "';'") == 0)
            continue;
        if (any_name && exp[i] >= YYSYMBOL_PIPELINE && exp[i] <= YYSYMBOL_ELSE)
            continue;
        shown[nshown++] = any_name && exp[i] == YYSYMBOL_IDENT ? "name"
                          : exp[i] == YYSYMBOL_YYEOF && ps->pass_list ? "the end of the pass list"
                          : exp[i] == YYSYMBOL_YYEOF && ps->setting ? "the end of the --set value"
                          : yysymbol_name(exp[i]);
    }
    /* A word of capitals or letters and digits that is no op (`X0`, `Fw3`) read as a
     * template op call missing its '(': the error is the word, not the token after it. */
    const SrcFile *sf = &ps->d->files[ps->file];
    bool word_before = ps->word_end <= tl->off && tl->off <= sf->len;
    for (uint32_t i = ps->word_end; word_before && i < tl->off; i++)
        word_before = sf->text[i] == ' ' || sf->text[i] == '\t' || sf->text[i] == '\n' ||
                      sf->text[i] == '\r';
    if (word_before && nshown == 1 && strcmp(shown[0], "'('") == 0 &&
        op_like(sf->text + ps->word_off, ps->word_end - ps->word_off) &&
        !pipe_keyword_closest(sf->text + ps->word_off, ps->word_end - ps->word_off)) {
        sb_free(&b);
        sb_printf(&b, "unknown op '%.*s': an op is KIND MB[.CHUNK] (F3, B3.1), KIND one of",
                  (int)(ps->word_end - ps->word_off), sf->text + ps->word_off);
        for (int k = 0; k < OP_NKINDS; k++)
            sb_printf(&b, " %s", op_kind_name[k]);
        sb_puts(&b, ", or in a template KIND(i)");
        diag_error(ps->d, (Loc){ps->word_off, ps->file}, DIAG_SYNTAX, "%s", b.s);
        sb_free(&b);
        return 0;
    }
    if (nshown > 0 && nshown <= 6) {
        sb_puts(&b, ", expected ");
        for (int i = 0; i < nshown; i++) {
            size_t len = strlen(shown[i]);
            bool q = len >= 2 && shown[i][0] == '"';
            sb_printf(&b, "%s%.*s", i == 0 ? "" : i == nshown - 1 ? " or " : ", ",
                      (int)(q ? len - 2 : len), shown[i] + q);
        }
    }
    diag_error(ps->d, L(*tl), DIAG_SYNTAX, "%s", b.s);
    sb_free(&b);
    /* A misspelt keyword reads as a name: `microbatch 4`, `stagess 4`. The word is the
     * unexpected token itself or the one just before it. */
    const SrcFile *f = &ps->d->files[ps->file];
    bool just_before = ps->word_end <= tl->off && tl->off <= f->len;
    for (uint32_t i = ps->word_end; just_before && i < tl->off; i++)
        just_before = f->text[i] == ' ' || f->text[i] == '\t' || f->text[i] == '\n' ||
                      f->text[i] == '\r';
    if (tok == YYSYMBOL_IDENT || just_before) {
        uint32_t wo = tok == YYSYMBOL_IDENT ? tl->off : ps->word_off;
        uint32_t we = tok == YYSYMBOL_IDENT ? tl->end : ps->word_end;
        const char *kw = we > wo && we <= f->len ? pipe_keyword_closest(f->text + wo, we - wo) : NULL;
        if (kw)
            diag_note(ps->d, (Loc){wo, ps->file}, "did you mean '%s'?", kw);
    }
    if (tok == YYSYMBOL_YYEOF) {
        ps->eof_reported = true;
        note_unterminated(ps);
    }
    return 0;
}

int pipe_yylex_init_extra(PipeParse *extra, void **scanner);
int pipe_yylex_destroy(void *scanner);
void *pipe_yy_scan_bytes(const char *bytes, int len, void *scanner);

/* What parse reads: a file, a pass list or one setting. */
typedef enum ParseMode { PARSE_FILE, PARSE_PASS_LIST, PARSE_SETTING } ParseMode;

/* Parses file `file` of d in mode m; the scanner reads scan[0..len of the file) when
 * scan is not NULL (a copy of the file's text with some bytes blanked, so locations
 * stay those of the file), else the file's text. Returns the items (or N_APPLY calls,
 * or the setting) and whether no error was reported. */
static Node *parse(Diag *d, AstCtx *c, uint32_t file, ParseMode m, const char *scan, bool *ok)
{
    PipeParse ps = {.d = d, .c = c, .file = file, .pass_list = m == PARSE_PASS_LIST,
                    .setting = m == PARSE_SETTING};
    int before = d->nerr;
    void *scanner;
    if (pipe_yylex_init_extra(&ps, &scanner))
        out_of_memory(); /* its only failure: the scanner's state could not be allocated */
    const SrcFile *f = &d->files[file];
    pipe_yy_scan_bytes(scan ? scan : f->text, (int)f->len, scanner);
    pipe_yyparse(scanner, &ps);
    /* Error recovery can swallow the error at the end of the file (bison reports
     * nothing until three tokens were read after an error): say what is left open. A
     * pass list or a setting has no recovery: its first error ends the parse. */
    if (m == PARSE_FILE && !ps.aborted && !ps.eof_reported && ps.nopen > 0) {
        diag_error(d, (Loc){ps.tok_end, file}, DIAG_SYNTAX, "unexpected end of file");
        note_unterminated(&ps);
    }
    pipe_yylex_destroy(scanner);
    free(ps.open);
    *ok = d->nerr == before;
    return ps.items;
}

void ast_parse(Diag *d, AstCtx *c, uint32_t file, AstFile *out)
{
    out->file = file;
    out->items = parse(d, c, file, PARSE_FILE, NULL, &out->ok);
}

Node *ast_parse_pass_list(Diag *d, AstCtx *c, uint32_t file)
{
    bool ok;
    Node *calls = parse(d, c, file, PARSE_PASS_LIST, NULL, &ok);
    return ok ? calls : NULL;
}

Node *ast_parse_setting(Diag *d, AstCtx *c, uint32_t file, uint32_t key_end, uint32_t lo,
                        uint32_t hi)
{
    const SrcFile *f = &d->files[file];
    char *scan = xmalloc((size_t)f->len + 1);
    for (uint32_t i = 0; i < f->len; i++)
        scan[i] = i < key_end || (i >= lo && i < hi) ? f->text[i] : ' ';
    scan[f->len] = 0;
    bool ok;
    Node *n = parse(d, c, file, PARSE_SETTING, scan, &ok);
    free(scan);
    return ok ? n : NULL;
}
