/* The per-record loops of `transactions: consistent` in C: the tasks' per-event hold (`Scanner`
 * over a `PublishIndex`, below) and the driver's END markers (`ends`, further down).
 *
 * `HeldSplit.fast_py` (ingest/sink/held.py) is the reference of the hold: a Scanner does
 * exactly what its loop does for the events whose block is the common shape (a JSON object
 * whose "id" is a non-empty string of printable ASCII without escapes and whose "total_order"
 * is a plain integer in 1..limit, each once), and hands every other event back to Python as
 * "odd", which reads it as the reference does. tests/unit/ingest/sink/test_holdscan.py checks
 * the two against each other.
 *
 * Why C, and why these shapes: the loop runs once for every change event a task reads. Reading
 * each event's block as a msgspec struct and the struct's fields here cost ~300 ns an event in
 * the benchmark's tasks, and every run of a transaction's events (~2.3 events in the benchmark:
 * a transaction's events are spread over the partitions) made a str of its id, looked it up in
 * a frozenset of ~20,000 ids and appended it and a Python int to two lists. Here the block is
 * read from the raw bytes msgspec hands over (`msgspec.Raw`), the id is compared and looked up
 * as bytes, and a run of a transaction the batch publishes directly (a "candidate") is kept as
 * its position in the batch's list of candidates and a 64-bit mask in two C arrays: no Python
 * object for it at all (bench/RESULTS.md, source transactions, run 25).
 *
 * PublishIndex(ids, candidates)
 *     the ids a batch publishes: the first `candidates` of them are the batch's candidates in
 *     commit order (a run of one is reported by its position), the others were published
 *     before (a run of one is reported by its id). `position(txn)` gives the position, -1 for
 *     a published id without one, None for an id not published (its events are held).
 *
 * Scanner(index, limit).scan(blocks) -> (held, odd)
 *     blocks  each fast-path event's block, in offset order: a msgspec.Raw (empty: no block;
 *             null: none) or None
 *     held    (index, transaction id, rank) of each event held
 *     odd     indices of the events left to Python
 * Scanner.finish() -> (placed, ids, masks)
 *     the runs ended so far and the one under way (which ends): `placed` the little-endian
 *     uint64 masks of the candidates' runs, then their int32 positions; `ids` and `masks` the
 *     other runs (a str id and an int mask each). A run continues across scan() calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifndef HOLDSCAN_SOURCE_SHA256
#define HOLDSCAN_SOURCE_SHA256 "unknown"
#endif

/* str.isdecimal of an ASCII string. */
static int
is_decimal(const char *s, Py_ssize_t n)
{
    if (n == 0)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static int
append_new(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* ---- Reading JSON text of the common shapes ------------------------------------------------ */

typedef struct {
    const char *p, *end;
} Cursor;

static void
skip_ws(Cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int
take(Cursor *c, char ch)
{
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int
take_word(Cursor *c, const char *word, Py_ssize_t n)
{
    if (c->end - c->p >= n && memcmp(c->p, word, (size_t)n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static int
take_null(Cursor *c)
{
    return take_word(c, "null", 4);
}

/* A string of printable ASCII without escapes: its bytes in [*s, *s + *n). The cursor is
 * walked in a local (as in skip_nested: through `c`, every step was a store to memory). */
static int
plain_string(Cursor *c, const char **s, Py_ssize_t *n)
{
    if (!take(c, '"'))
        return 0;
    const char *start = c->p, *end = c->end;
    for (const char *p = start; p < end; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') {
            *s = start;
            *n = p - start;
            c->p = p + 1;
            return 1;
        }
        if (ch == '\\' || ch < 0x20 || ch > 0x7e)
            return 0;
    }
    return 0;
}

/* A JSON integer of 1 to 18 digits, no sign, no leading zero. */
static int
plain_int(Cursor *c, long long *value)
{
    const char *start = c->p;
    long long v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (c->p - start == 18)
            return 0;
        v = v * 10 + (*c->p - '0');
        c->p++;
    }
    if (c->p == start || (c->p - start > 1 && *start == '0'))
        return 0;
    *value = v;
    return 1;
}

/* Past the string whose opening quote is at p[-1]: a closing-quote candidate at a time
 * (memchr); a quote after an odd run of backslashes is escaped. NULL if it never closes. */
static const char *
past_string(const char *p, const char *end)
{
    for (;;) {
        const char *quote = memchr(p, '"', (size_t)(end - p));
        if (quote == NULL)
            return NULL;
        const char *run = quote;
        while (run > p && run[-1] == '\\')
            run--;
        p = quote + 1;
        if (((quote - run) & 1) == 0)
            return p;
    }
}

/* Past an array or object starting at c->p (brackets matched, strings and their escapes
 * skipped; nothing else checked: a caller uses the text only where msgspec read the whole
 * value as JSON). Returns the closing bracket, 0 if none. Half of the END loop's time went
 * here when it went a byte at a time through strings. */
static char
skip_nested(Cursor *c)
{
    const char *p = c->p, *end = c->end;
    int depth = 0;
    while (p < end) {
        char ch = *p++;
        if (ch == '"') {
            p = past_string(p, end);
            if (p == NULL)
                return 0;
        }
        else if (ch == '[' || ch == '{')
            depth++;
        else if (ch == ']' || ch == '}') {
            if (--depth == 0) {
                c->p = p;
                return ch;
            }
        }
    }
    return 0;
}

/* Past any one JSON value (its text as msgspec accepted it around the caller's fields). */
static int
skip_value(Cursor *c)
{
    if (c->p >= c->end)
        return 0;
    char ch = *c->p;
    if (ch == '"') {
        const char *past = past_string(c->p + 1, c->end);
        if (past == NULL)
            return 0;
        c->p = past;
        return 1;
    }
    if (ch == '[' || ch == '{')
        return skip_nested(c) != 0;
    const char *start = c->p;
    while (c->p < c->end) {
        ch = *c->p;
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || ch == '-' || ch == '+'
              || ch == '.' || ch == 'E'))
            break;
        c->p++;
    }
    return c->p > start;
}

#define IS_KEY(k, n, name) ((n) == (Py_ssize_t)sizeof(name) - 1 && memcmp((k), (name), (n)) == 0)

/* ---- The hold: a batch's publish set as an index of bytes ---------------------------------- */

typedef struct {
    uint64_t hash;
    Py_ssize_t offset, length; /* the id's UTF-8 bytes in the arena */
    long position;             /* >= 0: a candidate's; -1: published, without a position */
    int used;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t mask; /* slots - 1: a power of two at least twice the ids */
    char *arena;
    Py_ssize_t count, candidates;
} PublishIndex;

/* A position for "not published": the transaction's events are held. */
#define HELD (-2L)

static uint64_t
fnv1a(const char *s, Py_ssize_t n)
{
    uint64_t h = 14695981039346656037ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static Slot *
index_slot(const PublishIndex *index, const char *s, Py_ssize_t n, uint64_t hash)
{
    for (size_t at = (size_t)hash & index->mask;; at = (at + 1) & index->mask) {
        Slot *slot = &index->slots[at];
        if (!slot->used || (slot->hash == hash && slot->length == n
                            && memcmp(index->arena + slot->offset, s, (size_t)n) == 0))
            return slot;
    }
}

static long
index_position(const PublishIndex *index, const char *s, Py_ssize_t n)
{
    Slot *slot = index_slot(index, s, n, fnv1a(s, n));
    return slot->used ? slot->position : HELD;
}

/* A str's UTF-8 bytes, lone surrogates included (ids come from JSON, which can name them):
 * the str's own cached text where it has one (*owner NULL), else a bytes object in *owner. */
static int
utf8_view(PyObject *text, const char **s, Py_ssize_t *n, PyObject **owner)
{
    *owner = NULL;
    *s = PyUnicode_AsUTF8AndSize(text, n);
    if (*s != NULL)
        return 0;
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return -1;
    PyErr_Clear();
    *owner = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
    if (*owner == NULL)
        return -1;
    *s = PyBytes_AS_STRING(*owner);
    *n = PyBytes_GET_SIZE(*owner);
    return 0;
}

static void
index_dealloc(PublishIndex *self)
{
    PyMem_Free(self->slots);
    PyMem_Free(self->arena);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The arena's size for `ids` (all str, checked), or -1. */
static Py_ssize_t
index_bytes(PyObject **ids, Py_ssize_t count)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *s;
        Py_ssize_t n;
        PyObject *owner;
        if (!PyUnicode_Check(ids[i])) {
            PyErr_SetString(PyExc_TypeError, "PublishIndex: ids must be str");
            return -1;
        }
        if (utf8_view(ids[i], &s, &n, &owner) < 0)
            return -1;
        Py_XDECREF(owner);
        total += n;
    }
    return total;
}

static int
index_fill(PublishIndex *self, PyObject **ids, Py_ssize_t count)
{
    Py_ssize_t total = index_bytes(ids, count);
    if (total < 0)
        return -1;
    size_t size = 8;
    while (size < 2 * (size_t)count)
        size <<= 1;
    self->slots = PyMem_Calloc(size, sizeof(Slot));
    self->arena = PyMem_Malloc((size_t)total + 1);
    if (self->slots == NULL || self->arena == NULL)
        return (PyErr_NoMemory(), -1);
    self->mask = size - 1;
    Py_ssize_t offset = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *s;
        Py_ssize_t n;
        PyObject *owner;
        if (utf8_view(ids[i], &s, &n, &owner) < 0)
            return -1;
        uint64_t hash = fnv1a(s, n);
        Slot *slot = index_slot(self, s, n, hash);
        if (!slot->used) { /* an id named twice: the first (a candidate's position) stands */
            memcpy(self->arena + offset, s, (size_t)n);
            *slot = (Slot){hash, offset, n, i < self->candidates ? (long)i : -1L, 1};
            offset += n;
            self->count++;
        }
        Py_XDECREF(owner);
    }
    return 0;
}

static PyObject *
index_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"ids", "candidates", NULL};
    PyObject *ids;
    Py_ssize_t candidates;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On:PublishIndex", names, &ids, &candidates))
        return NULL;
    PyObject *seq = PySequence_Fast(ids, "PublishIndex: ids must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (candidates < 0 || candidates > count) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "PublishIndex: %zd candidates of %zd ids",
                            candidates, count);
    }
    PublishIndex *self = (PublishIndex *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->candidates = candidates;
        if (index_fill(self, PySequence_Fast_ITEMS(seq), count) < 0)
            Py_CLEAR(self);
    }
    Py_DECREF(seq);
    return (PyObject *)self;
}

/* The position of a str id: -1 published without one, -2 (HELD) not published. */
static int
index_lookup(PublishIndex *self, PyObject *txn, long *position)
{
    const char *s;
    Py_ssize_t n;
    PyObject *owner;
    if (!PyUnicode_Check(txn)) {
        *position = HELD;
        return 0;
    }
    if (utf8_view(txn, &s, &n, &owner) < 0)
        return -1;
    *position = index_position(self, s, n);
    Py_XDECREF(owner);
    return 0;
}

static PyObject *
index_position_of(PublishIndex *self, PyObject *txn)
{
    long position;
    if (index_lookup(self, txn, &position) < 0)
        return NULL;
    if (position == HELD)
        Py_RETURN_NONE;
    return PyLong_FromLong(position);
}

static int
index_contains(PublishIndex *self, PyObject *txn)
{
    long position;
    if (index_lookup(self, txn, &position) < 0)
        return -1;
    return position != HELD;
}

static Py_ssize_t
index_len(PublishIndex *self)
{
    return self->count;
}

static PyObject *
index_candidates(PublishIndex *self, void *closure)
{
    return PyLong_FromSsize_t(self->candidates);
}

static PyMethodDef index_methods[] = {
    {"position", (PyCFunction)index_position_of, METH_O,
     "The candidate's position, -1 for an id published without one, None if not published."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef index_getset[] = {
    {"candidates", (getter)index_candidates, NULL, "How many ids have positions.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods index_as_sequence = {
    .sq_length = (lenfunc)index_len,
    .sq_contains = (objobjproc)index_contains,
};

static PyTypeObject PublishIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ingest.sink._holdscan.PublishIndex",
    .tp_basicsize = sizeof(PublishIndex),
    .tp_dealloc = (destructor)index_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A batch's publish set, looked up by bytes; see the module's source.",
    .tp_new = index_new,
    .tp_methods = index_methods,
    .tp_getset = index_getset,
    .tp_as_sequence = &index_as_sequence,
};

/* ---- The hold: a task's scanner ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PublishIndex *index;
    long limit;
    /* the run under way: its transaction's (normalised) id, made a str only when needed */
    char *txn;
    Py_ssize_t txn_n, txn_cap;
    int running;
    PyObject *txn_str;
    long position; /* of the run's transaction in the index, HELD when its events are held */
    uint64_t low;  /* ranks below 64 */
    PyObject *high; /* the others, as an int (NULL: none) */
    /* candidates' runs ended: masks and positions */
    uint64_t *placed_masks;
    int32_t *placed;
    Py_ssize_t placed_n, placed_cap;
    /* the other runs ended: ids and masks */
    PyObject *ids, *masks;
} Scanner;

static PyObject *
scanner_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"index", "limit", NULL};
    PyObject *index;
    long limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!l:Scanner", names, &PublishIndexType,
                                     &index, &limit))
        return NULL;
    Scanner *self = (Scanner *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->index = (PublishIndex *)Py_NewRef(index);
    self->limit = limit;
    self->ids = PyList_New(0);
    self->masks = PyList_New(0);
    if (self->ids == NULL || self->masks == NULL)
        Py_CLEAR(self);
    return (PyObject *)self;
}

static void
scanner_dealloc(Scanner *self)
{
    Py_XDECREF(self->index);
    PyMem_Free(self->txn);
    Py_XDECREF(self->txn_str);
    Py_XDECREF(self->high);
    PyMem_Free(self->placed_masks);
    PyMem_Free(self->placed);
    Py_XDECREF(self->ids);
    Py_XDECREF(self->masks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The run's id as a str (a borrowed reference owned by the scanner), made once per run. */
static PyObject *
run_txn(Scanner *self)
{
    if (self->txn_str == NULL)
        self->txn_str = PyUnicode_DecodeASCII(self->txn, self->txn_n, NULL);
    return self->txn_str;
}

static PyObject *
run_mask(const Scanner *self)
{
    PyObject *mask = PyLong_FromUnsignedLongLong(self->low);
    if (mask != NULL && self->high != NULL) {
        PyObject *both = PyNumber_Or(mask, self->high);
        Py_DECREF(mask);
        mask = both;
    }
    return mask;
}

static int
place(Scanner *self)
{
    if (self->placed_n == self->placed_cap) {
        Py_ssize_t cap = self->placed_cap ? 2 * self->placed_cap : 1024;
        uint64_t *masks = PyMem_Realloc(self->placed_masks, (size_t)cap * sizeof(uint64_t));
        if (masks == NULL)
            return (PyErr_NoMemory(), -1);
        self->placed_masks = masks;
        int32_t *placed = PyMem_Realloc(self->placed, (size_t)cap * sizeof(int32_t));
        if (placed == NULL)
            return (PyErr_NoMemory(), -1);
        self->placed = placed;
        self->placed_cap = cap;
    }
    self->placed_masks[self->placed_n] = self->low;
    self->placed[self->placed_n++] = (int32_t)self->position;
    return 0;
}

/* End the run under way, if any: a candidate's by its position, any other by its id. */
static int
end_run(Scanner *self)
{
    if (!self->running)
        return 0;
    self->running = 0;
    int failed;
    if (self->position >= 0 && self->position <= INT32_MAX && self->high == NULL)
        failed = place(self);
    else {
        PyObject *txn = run_txn(self);
        failed = txn == NULL || PyList_Append(self->ids, txn) < 0
                 || append_new(self->masks, run_mask(self)) < 0;
    }
    Py_CLEAR(self->txn_str);
    Py_CLEAR(self->high);
    return failed ? -1 : 0;
}

static int
start_run(Scanner *self, const char *txn, Py_ssize_t n)
{
    if (end_run(self) < 0)
        return -1;
    if (n > self->txn_cap) {
        char *grown = PyMem_Realloc(self->txn, (size_t)n);
        if (grown == NULL)
            return (PyErr_NoMemory(), -1);
        self->txn = grown;
        self->txn_cap = n;
    }
    memcpy(self->txn, txn, (size_t)n);
    self->txn_n = n;
    self->running = 1;
    self->low = 0;
    self->position = index_position(self->index, txn, n);
    return 0;
}

static int
add_rank(Scanner *self, long long rank)
{
    if (rank < 64) {
        self->low |= (uint64_t)1 << rank;
        return 0;
    }
    PyObject *one = PyLong_FromLong(1), *shift = PyLong_FromLongLong(rank), *bit = NULL;
    if (one != NULL && shift != NULL)
        bit = PyNumber_Lshift(one, shift);
    Py_XDECREF(one);
    Py_XDECREF(shift);
    if (bit == NULL)
        return -1;
    if (self->high == NULL) {
        self->high = bit;
        return 0;
    }
    PyObject *both = PyNumber_Or(self->high, bit);
    Py_DECREF(bit);
    if (both == NULL)
        return -1;
    Py_SETREF(self->high, both);
    return 0;
}

typedef struct {
    const char *id;
    Py_ssize_t id_n;
    long long rank;
} Block;

/* One key of a block's object into `b`; 0 when it is not the common shape. */
static int
block_field(Cursor *c, const char *key, Py_ssize_t key_n, Block *b)
{
    if (IS_KEY(key, key_n, "id"))
        return b->id == NULL && plain_string(c, &b->id, &b->id_n) && b->id_n > 0;
    if (IS_KEY(key, key_n, "total_order"))
        return b->rank < 0 && plain_int(c, &b->rank);
    return skip_value(c);
}

/* A block's text (msgspec.Raw's bytes): 1 a common block (into `b`), 0 no block (absent or
 * null), -1 odd (Python reads it). */
static int
parse_block(const char *buf, Py_ssize_t len, long limit, Block *b)
{
    Cursor c = {buf, buf + len};
    skip_ws(&c);
    if (c.p == c.end)
        return 0;
    if (take_null(&c)) {
        skip_ws(&c);
        return c.p == c.end ? 0 : -1;
    }
    if (!take(&c, '{'))
        return -1;
    for (;;) {
        const char *key;
        Py_ssize_t key_n;
        skip_ws(&c);
        if (!plain_string(&c, &key, &key_n))
            return -1;
        skip_ws(&c);
        if (!take(&c, ':'))
            return -1;
        skip_ws(&c);
        if (!block_field(&c, key, key_n, b))
            return -1;
        skip_ws(&c);
        if (take(&c, '}'))
            break;
        if (!take(&c, ','))
            return -1;
    }
    skip_ws(&c);
    if (c.p != c.end || b->id == NULL || b->rank < 1 || b->rank > limit)
        return -1;
    return 1;
}

/* normalise_id of a block's id: `<txId>:<lsn>` (both decimal) names `txId`, any other the id. */
static Py_ssize_t
normalised_length(const char *id, Py_ssize_t n)
{
    const char *colon = memchr(id, ':', (size_t)n);
    if (colon == NULL)
        return n;
    Py_ssize_t head = colon - id;
    return is_decimal(id, head) && is_decimal(colon + 1, n - head - 1) ? head : n;
}

/* One event's block: its rank into the run, its index into `held` or `odd` as it goes. */
static int
scan_event(Scanner *self, Py_ssize_t at, PyObject *block, PyObject *held, PyObject *odd)
{
    Py_buffer view;
    if (PyObject_GetBuffer(block, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return append_new(odd, PyLong_FromSsize_t(at));
    }
    Block b = {NULL, 0, -1};
    int shape = parse_block(view.buf, view.len, self->limit, &b);
    int failed = 0;
    if (shape < 0)
        failed = append_new(odd, PyLong_FromSsize_t(at));
    else if (shape > 0) {
        Py_ssize_t n = normalised_length(b.id, b.id_n);
        if (!self->running || self->txn_n != n || memcmp(self->txn, b.id, (size_t)n) != 0)
            failed = start_run(self, b.id, n);
        if (!failed)
            failed = add_rank(self, b.rank);
        if (!failed && self->position == HELD) {
            PyObject *txn = run_txn(self);
            failed = txn == NULL || append_new(held, Py_BuildValue("(nOL)", at, txn, b.rank));
        }
    }
    PyBuffer_Release(&view);
    return failed ? -1 : 0;
}

static PyObject *
scanner_scan(Scanner *self, PyObject *blocks)
{
    PyObject *events = PySequence_Fast(blocks, "scan: blocks must be a sequence");
    if (events == NULL)
        return NULL;
    PyObject *held = PyList_New(0), *odd = PyList_New(0), *result = NULL;
    if (held == NULL || odd == NULL)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(events);
    PyObject **items = PySequence_Fast_ITEMS(events);
    for (Py_ssize_t at = 0; at < count; at++) {
        if (items[at] != Py_None && scan_event(self, at, items[at], held, odd) < 0)
            goto done;
    }
    result = PyTuple_Pack(2, held, odd);
done:
    Py_DECREF(events);
    Py_XDECREF(held);
    Py_XDECREF(odd);
    return result;
}

static PyObject *
scanner_finish(Scanner *self, PyObject *unused)
{
    if (end_run(self) < 0)
        return NULL;
    Py_ssize_t n = self->placed_n;
    PyObject *placed = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)(sizeof(uint64_t) + 4));
    if (placed == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(placed);
    for (Py_ssize_t i = 0; i < n; i++) { /* little-endian, as numpy reads "<u8" and "<i4" */
        uint64_t mask = self->placed_masks[i];
        for (int k = 0; k < 8; k++)
            out[8 * i + k] = (char)(mask >> (8 * k));
        uint32_t position = (uint32_t)self->placed[i];
        for (int k = 0; k < 4; k++)
            out[8 * n + 4 * i + k] = (char)(position >> (8 * k));
    }
    PyObject *ids = PyList_GetSlice(self->ids, 0, PY_SSIZE_T_MAX);
    PyObject *masks = PyList_GetSlice(self->masks, 0, PY_SSIZE_T_MAX);
    if (ids == NULL || masks == NULL) {
        Py_DECREF(placed);
        Py_XDECREF(ids);
        Py_XDECREF(masks);
        return NULL;
    }
    return Py_BuildValue("(NNN)", placed, ids, masks); /* copies: later scans append more */
}

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_O, "HeldSplit.fast_py's loop over blocks."},
    {"finish", (PyCFunction)scanner_finish, METH_NOARGS, "End the run; the runs so far."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ingest.sink._holdscan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A task's hold over a PublishIndex; see the module's source.",
    .tp_new = scanner_new,
    .tp_methods = scanner_methods,
};

/* ---- The driver's END markers (ingest/transactions/markers.py, decode_end) ----------------
 *
 * ends(values, seen, marker_type, end_status) -> (markers, odd)
 *
 * values   records of the transaction topic (bytes or None), in offset order
 * seen     markers._SEEN_COLLECTIONS: the `data_collections` texts read before, and what they
 *          said (only read here; a text not in it leaves the record to Python)
 * markers  per record: None (a tombstone, an empty value, a BEGIN by its first bytes) or the
 *          TransactionMarker decode_end makes; the records named in `odd` hold None, to be read
 *          by decode_end in Python
 * odd      indices of the records not of the common shape: one compact or spaced JSON object
 *          of the keys status ("END"), id (printable ASCII, no escapes), event_count and ts_ms
 *          (plain integers below 10^18; ts_ms may be null or absent) and data_collections
 *          (an array or null, absent allowed), each at most once, and nothing else
 *
 * Why C: the driver decodes every END of the transaction topic (about one per 10 events in the
 * benchmark), ~2.5 us each in Python before the book takes it. */

static const char BEGIN_PREFIX[] = "{\"status\":\"BEGIN\",\"id\":\"";
#define BEGIN_LEN (sizeof(BEGIN_PREFIX) - 1)

typedef struct {
    const char *id, *collections;
    Py_ssize_t id_n, collections_n;
    long long count, ts;
    int status, has_ts, has_collections;
} EndFields;

/* One key's value into `f`; 0 when the value or a repeated key is not the common shape. */
static int
end_field(Cursor *c, const char *key, Py_ssize_t key_n, EndFields *f)
{
    const char *s;
    Py_ssize_t n;
    if (IS_KEY(key, key_n, "status")) {
        if (f->status || !plain_string(c, &s, &n) || n != 3 || memcmp(s, "END", 3) != 0)
            return 0;
        return f->status = 1;
    }
    if (IS_KEY(key, key_n, "id"))
        return f->id == NULL && plain_string(c, &f->id, &f->id_n) && f->id_n > 0;
    if (IS_KEY(key, key_n, "event_count"))
        return f->count < 0 && plain_int(c, &f->count);
    if (IS_KEY(key, key_n, "ts_ms")) {
        if (f->has_ts)
            return 0;
        f->has_ts = 1;
        return take_null(c) || plain_int(c, &f->ts);
    }
    if (IS_KEY(key, key_n, "data_collections")) {
        if (f->has_collections)
            return 0;
        f->has_collections = 1;
        f->collections = c->p;
        if (!take_null(c) && !(c->p < c->end && *c->p == '[' && skip_nested(c) == ']'))
            return 0;
        f->collections_n = c->p - f->collections;
        return 1;
    }
    return 0;
}

/* The fields of one END record; 0 when it is not the common shape. */
static int
end_fields(const char *buf, Py_ssize_t len, EndFields *f)
{
    Cursor c = {buf, buf + len};
    skip_ws(&c);
    if (!take(&c, '{'))
        return 0;
    for (;;) {
        const char *key;
        Py_ssize_t key_n;
        skip_ws(&c);
        if (!plain_string(&c, &key, &key_n))
            return 0;
        skip_ws(&c);
        if (!take(&c, ':'))
            return 0;
        skip_ws(&c);
        if (!end_field(&c, key, key_n, f))
            return 0;
        skip_ws(&c);
        if (take(&c, '}'))
            break;
        if (!take(&c, ','))
            return 0;
    }
    skip_ws(&c);
    return c.p == c.end && f->status && f->id != NULL && f->count >= 0;
}

/* markers._position of a decimal LSN: 16 hex digits and 16 zeros; None past 64 bits. */
static PyObject *
lsn_position(const char *digits, Py_ssize_t n)
{
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t d = (uint64_t)(digits[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            Py_RETURN_NONE;
        v = v * 10 + d;
    }
    char hex[32];
    for (int i = 15; i >= 0; i--, v >>= 4)
        hex[i] = "0123456789abcdef"[v & 15];
    memset(hex + 16, '0', 16);
    return PyUnicode_FromStringAndSize(hex, 32);
}

/* The value `table` (a dict keyed by data_collections texts) holds for the END's text: a new
 * reference, or Py_None (new) when it holds none; NULL on error. Owned: the allocations that
 * follow may run the collector, and with it code of another thread that changes `table`. */
static PyObject *
by_collections(const EndFields *f, PyObject *table)
{
    PyObject *key = PyBytes_FromStringAndSize(f->collections, f->collections_n);
    if (key == NULL)
        return NULL;
    PyObject *found = PyDict_GetItemWithError(table, key);
    Py_DECREF(key);
    if (found == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    return Py_NewRef(found);
}

/* The END's transaction (normalise_id) and source position (None where the id carries none),
 * as decode_end names them: new references, 0; -1 on error. */
static int
end_id(const EndFields *f, PyObject **txn, PyObject **position)
{
    const char *colon = memchr(f->id, ':', f->id_n);
    Py_ssize_t head = colon == NULL ? 0 : colon - f->id;
    if (colon != NULL && is_decimal(f->id, head) && is_decimal(colon + 1, f->id_n - head - 1)) {
        *txn = PyUnicode_FromStringAndSize(f->id, head);
        *position = lsn_position(colon + 1, f->id_n - head - 1);
    }
    else {
        *txn = PyUnicode_FromStringAndSize(f->id, f->id_n);
        *position = Py_NewRef(Py_None);
    }
    if (*txn != NULL && *position != NULL)
        return 0;
    Py_CLEAR(*txn);
    Py_CLEAR(*position);
    return -1;
}

/* A tuple of `type` holding `fields` (stolen, all of them, also on failure). */
static PyObject *
filled(PyTypeObject *type, PyObject **fields, int count)
{
    PyObject *made = NULL;
    int complete = 1;
    for (int i = 0; i < count; i++)
        complete = complete && fields[i] != NULL;
    if (complete)
        made = type->tp_alloc(type, count);
    for (int i = 0; i < count; i++) {
        if (made != NULL)
            PyTuple_SET_ITEM(made, i, fields[i]);
        else
            Py_XDECREF(fields[i]);
    }
    return made;
}

/* What one kind of loop makes of an END of the common shape: a new reference, Py_None to
 * leave it to Python, NULL on error. */
typedef PyObject *(*EndMaker)(const EndFields *f, void *context);

typedef struct {
    PyObject *seen, *end_status;
    PyTypeObject *marker_type;
} MarkerContext;

/* The TransactionMarker decode_end makes of the END; Py_None if its collections' text is not
 * in `seen`. */
static PyObject *
end_marker(const EndFields *f, void *context)
{
    MarkerContext *c = context;
    PyObject *collections = by_collections(f, c->seen);
    if (collections == NULL || collections == Py_None)
        return collections;
    PyObject *txn, *position;
    if (end_id(f, &txn, &position) < 0) {
        Py_DECREF(collections);
        return NULL;
    }
    PyObject *fields[6] = {
        Py_NewRef(c->end_status), txn, PyLong_FromLongLong(f->count), collections,
        f->ts < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(f->ts), position,
    };
    return filled(c->marker_type, fields, 6);
}

typedef struct {
    PyObject *shapes, *first_seen;
    PyTypeObject *state_type;
} StateContext;

/* The TxnState build_ends makes of the END; Py_None if its collections' text is not in
 * `shapes`. */
static PyObject *
end_state(const EndFields *f, void *context)
{
    StateContext *c = context;
    PyObject *shape = by_collections(f, c->shapes);
    if (shape == NULL || shape == Py_None)
        return shape;
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) != 2) {
        Py_DECREF(shape);
        return PyErr_Format(PyExc_TypeError, "end_states: a shape must be (expected, touched)");
    }
    PyObject *txn, *position;
    if (end_id(f, &txn, &position) < 0) {
        Py_DECREF(shape);
        return NULL;
    }
    PyObject *count = PyLong_FromLongLong(f->count);
    PyObject *expected = PyTuple_GET_ITEM(shape, 0);
    PyObject *fields[11] = {
        txn, Py_NewRef(c->first_seen), PyLong_FromLong(0), Py_NewRef(Py_True), Py_XNewRef(count),
        Py_XNewRef(expected == Py_None ? count : expected), Py_NewRef(PyTuple_GET_ITEM(shape, 1)),
        f->ts < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(f->ts), position,
        Py_NewRef(Py_None), Py_NewRef(Py_None),
    };
    Py_XDECREF(count);
    Py_DECREF(shape);
    return filled(c->state_type, fields, 11);
}

/* One record: what `make` makes of it, or None (a tombstone, an empty value, a BEGIN by its
 * first bytes) into `found`; or, for one not of the common shape, its index into `odd` (and
 * None into `found`). */
static int
end_record(PyObject *value, Py_ssize_t at, EndMaker make, void *context, PyObject *found,
           PyObject *odd)
{
    PyObject *made = NULL; /* stays NULL for an odd record */
    if (value == Py_None)
        return PyList_Append(found, Py_None);
    if (PyBytes_CheckExact(value)) {
        const char *buf = PyBytes_AS_STRING(value);
        Py_ssize_t len = PyBytes_GET_SIZE(value);
        if (len == 0 || (len >= (Py_ssize_t)BEGIN_LEN && memcmp(buf, BEGIN_PREFIX, BEGIN_LEN) == 0))
            return PyList_Append(found, Py_None);
        EndFields f = {NULL, "", 0, 0, -1, -1, 0, 0, 0};
        if (end_fields(buf, len, &f)) {
            made = make(&f, context);
            if (made == NULL)
                return -1;
            if (made == Py_None)
                Py_CLEAR(made);
        }
    }
    if (made != NULL)
        return append_new(found, made);
    if (append_new(odd, PyLong_FromSsize_t(at)) < 0)
        return -1;
    return PyList_Append(found, Py_None);
}

/* (found, odd) of every record of `values` (see end_record). */
static PyObject *
end_records(PyObject *values, EndMaker make, void *context)
{
    PyObject *records = PySequence_Fast(values, "values must be a sequence");
    if (records == NULL)
        return NULL;
    PyObject *found = PyList_New(0), *odd = PyList_New(0), *result = NULL;
    if (found == NULL || odd == NULL)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(records);
    PyObject **items = PySequence_Fast_ITEMS(records);
    for (Py_ssize_t at = 0; at < count; at++) {
        if (end_record(items[at], at, make, context, found, odd) < 0)
            goto done;
    }
    result = PyTuple_Pack(2, found, odd);
done:
    Py_DECREF(records);
    Py_XDECREF(found);
    Py_XDECREF(odd);
    return result;
}

static PyObject *
ends(PyObject *module, PyObject *args)
{
    MarkerContext c;
    PyObject *values;
    if (!PyArg_ParseTuple(args, "OO!O!O:ends", &values, &PyDict_Type, &c.seen, &PyType_Type,
                          &c.marker_type, &c.end_status))
        return NULL;
    if (!PyType_IsSubtype(c.marker_type, &PyTuple_Type))
        return PyErr_Format(PyExc_TypeError, "ends: marker_type must be a tuple type");
    return end_records(values, end_marker, &c);
}

/* ---- The driver's END markers as the book's states (ingest/transactions/book.py) ----------
 *
 * end_states(values, shapes, state_type, first_seen) -> (states, odd)
 *
 * values      records of the transaction topic, as for ends()
 * shapes      per `data_collections` text read before: (expected, touched) for the book's
 *             collections - the events of the transaction the job awaits (None: the END's
 *             own event_count) and the collections it names; a text not in it leaves the
 *             record to Python
 * state_type  TxnState (a tuple type of 11 fields)
 * first_seen  the float every state is first seen at
 * states      per record: None, or the TxnState build_ends makes of its END: (id, first_seen,
 *             0, True, event_count, expected, touched, ts_ms, position, None, None)
 * odd         as for ends(): the records to read in Python
 *
 * Why: the book takes a state per END, and the markers ends() made were only ever turned into
 * states (build_ends, a Python loop: ~15 ms a benchmark batch, on top of ~17 for ends()); the
 * few ENDs the book must take in place it reads from the markers, decoded when asked. */

static PyObject *
end_states(PyObject *module, PyObject *args)
{
    StateContext c;
    PyObject *values;
    if (!PyArg_ParseTuple(args, "OO!O!O!:end_states", &values, &PyDict_Type, &c.shapes,
                          &PyType_Type, &c.state_type, &PyFloat_Type, &c.first_seen))
        return NULL;
    if (!PyType_IsSubtype(c.state_type, &PyTuple_Type))
        return PyErr_Format(PyExc_TypeError, "end_states: state_type must be a tuple type");
    return end_records(values, end_state, &c);
}

static PyMethodDef methods[] = {
    {"ends", ends, METH_VARARGS, "markers.decode_end over records; see the module's source."},
    {"end_states", end_states, METH_VARARGS, "book.build_ends over records; see the source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_holdscan", "The per-record loops of consistent mode, in C.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__holdscan(void)
{
    if (PyType_Ready(&PublishIndexType) < 0 || PyType_Ready(&ScannerType) < 0)
        return NULL;
    PyObject *made = PyModule_Create(&module);
    if (made == NULL)
        return NULL;
    if (PyModule_AddStringConstant(made, "SOURCE_SHA256", HOLDSCAN_SOURCE_SHA256) < 0
        || PyModule_AddObjectRef(made, "PublishIndex", (PyObject *)&PublishIndexType) < 0
        || PyModule_AddObjectRef(made, "Scanner", (PyObject *)&ScannerType) < 0)
        Py_CLEAR(made);
    return made;
}
