/* The per-record loops of `transactions: consistent` in C: the tasks' per-event hold (`scan`,
 * below) and the driver's END markers (`ends`, further down).
 *
 * `HeldSplit.fast_py` (ingest/sink/held.py) is the reference: this does exactly what its loop
 * does, for the events whose block is the common shape (an ASCII string id, an int rank in
 * 1..limit), and hands every other event back to Python as "odd", which reads it as before.
 * Why C: the loop runs once for every change event a task reads; in Python it cost ~0.4 us an
 * event, a tenth of a consistent task's decode, here ~0.12 (bench/RESULTS.md, source
 * transactions, run 14). tests/unit/ingest/sink/test_holdscan.py checks both against each other.
 *
 * scan(blocks, publish, txn, extends, mask, holding, limit)
 *     -> (held, odd, run_ids, run_masks, txn, extends, mask, holding)
 *
 * blocks   the fast path's TransactionBlock (or None) of each event, in offset order
 * publish  the frozenset of transaction ids the batch publishes
 * txn, extends, mask, holding
 *          the run under way (HeldSplit._run), carried from the call before
 * held     (index, transaction id, rank) of each event held
 * odd      indices of the events left to Python
 * run_ids, run_masks
 *          the runs ended in this call: a transaction id and the mask of its ranks
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifndef HOLDSCAN_SOURCE_SHA256
#define HOLDSCAN_SOURCE_SHA256 "unknown"
#endif

static PyObject *name_id, *name_total_order;

/* The run under way: its transaction ("" for none), the txId an id must start with to extend
 * it (None: none does), its mask (bits below 64 in `low`, the others in `high`, what the call
 * before gave in `carry`), and whether its events are held. Every object is owned. */
typedef struct {
    PyObject *txn;
    PyObject *extends;
    uint64_t low;
    PyObject *high;
    PyObject *carry;
    int holding;
} Run;

typedef struct {
    PyObject *held, *odd, *run_ids, *run_masks;
} Out;

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

static PyObject *
run_mask(const Run *run)
{
    PyObject *mask = PyLong_FromUnsignedLongLong(run->low);
    PyObject *parts[2] = {run->high, run->carry};
    for (int i = 0; i < 2 && mask != NULL; i++) {
        if (parts[i] != NULL) {
            PyObject *both = PyNumber_Or(mask, parts[i]);
            Py_DECREF(mask);
            mask = both;
        }
    }
    return mask;
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

/* The event's rank if its block is the common shape, else 0 (an odd event). */
static long
common_rank(PyObject *raw, PyObject *order, long limit)
{
    if (!PyUnicode_CheckExact(raw) || !PyUnicode_IS_ASCII(raw) || PyUnicode_GET_LENGTH(raw) == 0
        || !PyLong_CheckExact(order))
        return 0;
    int overflow = 0;
    long rank = PyLong_AsLongAndOverflow(order, &overflow);
    if (rank == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return overflow || rank < 1 || rank > limit ? 0 : rank;
}

/* End the run under way (if any) and start the one of `txn` (a new reference, stolen). */
static int
start_run(Run *run, Out *out, PyObject *txn, PyObject *publish)
{
    if (PyUnicode_GET_LENGTH(run->txn) > 0) {
        if (PyList_Append(out->run_ids, run->txn) < 0 || append_new(out->run_masks, run_mask(run)) < 0) {
            Py_DECREF(txn);
            return -1;
        }
    }
    Py_SETREF(run->txn, txn);
    run->low = 0;
    Py_CLEAR(run->high);
    Py_CLEAR(run->carry);
    int published = PySet_Contains(publish, txn);
    if (published < 0)
        return -1;
    run->holding = !published;
    return 0;
}

/* normalise_id and the run's test, as fast_py has them: an id `<txId>:<lsn>` (both decimal)
 * names the transaction `txId`; an id extends the run when it starts with the run's txId and
 * the rest is `:<decimal>` or nothing. */
static int
follow_id(Run *run, Out *out, PyObject *raw, PyObject *publish)
{
    const char *id = (const char *)PyUnicode_DATA(raw);
    Py_ssize_t length = PyUnicode_GET_LENGTH(raw);
    const char *colon = memchr(id, ':', (size_t)length);
    Py_ssize_t head = colon != NULL ? colon - id : length;
    const char *lsn = colon != NULL ? colon + 1 : id + length;
    Py_ssize_t lsn_length = colon != NULL ? length - head - 1 : 0;
    int lsn_ok = colon == NULL || is_decimal(lsn, lsn_length);
    /* extends is compared byte for byte: only an ASCII one can equal an ASCII id's head */
    if (run->extends != Py_None && lsn_ok && PyUnicode_IS_ASCII(run->extends)
        && PyUnicode_GET_LENGTH(run->extends) == head
        && memcmp(PyUnicode_DATA(run->extends), id, (size_t)head) == 0)
        return 0;
    PyObject *first, *extends;
    if (colon != NULL && is_decimal(id, head) && is_decimal(lsn, lsn_length)) {
        first = PyUnicode_FromStringAndSize(id, head);
        if (first == NULL)
            return -1;
        extends = Py_NewRef(first);
    } else {
        first = Py_NewRef(raw);
        extends = Py_NewRef(colon == NULL && is_decimal(id, length) ? raw : Py_None);
    }
    Py_SETREF(run->extends, extends);
    int same = PyUnicode_Compare(first, run->txn);
    if (same == -1 && PyErr_Occurred()) {
        Py_DECREF(first);
        return -1;
    }
    if (same == 0) {
        Py_DECREF(first);
        return 0;
    }
    return start_run(run, out, first, publish);
}

static int
add_rank(Run *run, long rank)
{
    if (rank < 64) {
        run->low |= (uint64_t)1 << rank;
        return 0;
    }
    PyObject *one = PyLong_FromLong(1), *shift = PyLong_FromLong(rank), *bit = NULL;
    if (one != NULL && shift != NULL)
        bit = PyNumber_Lshift(one, shift);
    Py_XDECREF(one);
    Py_XDECREF(shift);
    if (bit == NULL)
        return -1;
    if (run->high == NULL) {
        run->high = bit;
        return 0;
    }
    PyObject *both = PyNumber_Or(run->high, bit);
    Py_DECREF(bit);
    if (both == NULL)
        return -1;
    Py_SETREF(run->high, both);
    return 0;
}

static int
scan_event(Run *run, Out *out, Py_ssize_t at, PyObject *block, PyObject *publish, long limit)
{
    PyObject *raw = PyObject_GetAttr(block, name_id);
    if (raw == NULL)
        return -1;
    PyObject *order = PyObject_GetAttr(block, name_total_order);
    if (order == NULL) {
        Py_DECREF(raw);
        return -1;
    }
    long rank = common_rank(raw, order, limit);
    Py_DECREF(order);
    int failed;
    if (rank == 0)
        failed = append_new(out->odd, PyLong_FromSsize_t(at));
    else if ((failed = follow_id(run, out, raw, publish)) == 0 && (failed = add_rank(run, rank)) == 0
             && run->holding)
        failed = append_new(out->held, Py_BuildValue("(nOl)", at, run->txn, rank));
    Py_DECREF(raw);
    return failed;
}

static PyObject *
scan(PyObject *module, PyObject *args)
{
    PyObject *blocks, *publish, *txn, *extends, *mask;
    int holding;
    long limit;
    if (!PyArg_ParseTuple(args, "OO!UOO!pl:scan", &blocks, &PyFrozenSet_Type, &publish, &txn,
                          &extends, &PyLong_Type, &mask, &holding, &limit))
        return NULL;
    if (extends != Py_None && !PyUnicode_Check(extends))
        return PyErr_Format(PyExc_TypeError, "scan: extends must be str or None");
    PyObject *events = PySequence_Fast(blocks, "scan: blocks must be a sequence");
    if (events == NULL)
        return NULL;
    Run run = {Py_NewRef(txn), Py_NewRef(extends), 0, NULL, Py_NewRef(mask), holding};
    Out out = {PyList_New(0), PyList_New(0), PyList_New(0), PyList_New(0)};
    PyObject *result = NULL;
    if (out.held == NULL || out.odd == NULL || out.run_ids == NULL || out.run_masks == NULL)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(events);
    PyObject **items = PySequence_Fast_ITEMS(events);
    for (Py_ssize_t at = 0; at < count; at++) {
        if (items[at] != Py_None && scan_event(&run, &out, at, items[at], publish, limit) < 0)
            goto done;
    }
    PyObject *final_mask = run_mask(&run);
    if (final_mask != NULL)
        result = Py_BuildValue("(OOOOOONO)", out.held, out.odd, out.run_ids, out.run_masks, run.txn,
                               run.extends, final_mask, run.holding ? Py_True : Py_False);
done:
    Py_DECREF(events);
    Py_XDECREF(out.held);
    Py_XDECREF(out.odd);
    Py_XDECREF(out.run_ids);
    Py_XDECREF(out.run_masks);
    Py_XDECREF(run.txn);
    Py_XDECREF(run.extends);
    Py_XDECREF(run.high);
    Py_XDECREF(run.carry);
    return result;
}

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
take_null(Cursor *c)
{
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

/* A string of printable ASCII without escapes: its bytes in [*s, *s + *n). The cursor is
 * walked in a local (as in skip_array: through `c`, every step was a store to memory). */
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

/* Past an array starting at c->p (brackets matched, strings and their escapes skipped). The
 * text is only used if it is a key of `seen`, which msgspec read as a whole JSON value. A
 * string is crossed a closing-quote candidate at a time (memchr): a quote after an odd run of
 * backslashes is escaped. Half of the loop's time went here, a byte at a time. */
static int
skip_array(Cursor *c)
{
    const char *p = c->p, *end = c->end;
    int depth = 0;
    while (p < end) {
        char ch = *p++;
        if (ch == '"') {
            for (;;) {
                const char *quote = memchr(p, '"', (size_t)(end - p));
                if (quote == NULL)
                    return 0;
                const char *run = quote;
                while (run > p && run[-1] == '\\')
                    run--;
                p = quote + 1;
                if (((quote - run) & 1) == 0)
                    break;
            }
        }
        else if (ch == '[' || ch == '{')
            depth++;
        else if (ch == ']' || ch == '}') {
            if (--depth == 0) {
                c->p = p;
                return ch == ']';
            }
        }
    }
    return 0;
}

typedef struct {
    const char *id, *collections;
    Py_ssize_t id_n, collections_n;
    long long count, ts;
    int status, has_ts, has_collections;
} EndFields;

#define IS_KEY(k, n, name) ((n) == (Py_ssize_t)sizeof(name) - 1 && memcmp((k), (name), (n)) == 0)

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
        if (!take_null(c) && !(c->p < c->end && *c->p == '[' && skip_array(c)))
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

/* The marker of one END of the common shape (a new reference), Py_None if its collections'
 * text is not in `seen` (NULL on error). */
static PyObject *
end_marker(const EndFields *f, PyObject *seen, PyTypeObject *marker_type, PyObject *end_status)
{
    PyObject *key = PyBytes_FromStringAndSize(f->collections, f->collections_n);
    if (key == NULL)
        return NULL;
    PyObject *collections = PyDict_GetItemWithError(seen, key);
    Py_DECREF(key);
    if (collections == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    /* owned from here: the allocations below may run the collector, and with it code of
     * another thread that clears `seen` */
    Py_INCREF(collections);
    const char *colon = memchr(f->id, ':', f->id_n);
    Py_ssize_t head = colon == NULL ? 0 : colon - f->id;
    PyObject *txn, *position;
    if (colon != NULL && is_decimal(f->id, head) && is_decimal(colon + 1, f->id_n - head - 1)) {
        txn = PyUnicode_FromStringAndSize(f->id, head);
        position = lsn_position(colon + 1, f->id_n - head - 1);
    }
    else {
        txn = PyUnicode_FromStringAndSize(f->id, f->id_n);
        position = Py_NewRef(Py_None);
    }
    PyObject *count = PyLong_FromLongLong(f->count);
    PyObject *ts = f->ts < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(f->ts);
    PyObject *marker = marker_type->tp_alloc(marker_type, 6);
    if (txn == NULL || position == NULL || count == NULL || ts == NULL || marker == NULL) {
        Py_DECREF(collections);
        Py_XDECREF(txn);
        Py_XDECREF(position);
        Py_XDECREF(count);
        Py_XDECREF(ts);
        Py_XDECREF(marker);
        return NULL;
    }
    PyObject *fields[6] = {Py_NewRef(end_status), txn, count, collections, ts, position};
    for (int i = 0; i < 6; i++)
        PyTuple_SET_ITEM(marker, i, fields[i]);
    return marker;
}

/* One record: its marker or None into `markers`, or its index into `odd` (and None). */
static int
end_record(PyObject *value, Py_ssize_t at, PyObject *seen, PyTypeObject *marker_type,
           PyObject *end_status, PyObject *markers, PyObject *odd)
{
    PyObject *marker = NULL; /* stays NULL for an odd record */
    if (value == Py_None)
        return PyList_Append(markers, Py_None);
    if (PyBytes_CheckExact(value)) {
        const char *buf = PyBytes_AS_STRING(value);
        Py_ssize_t len = PyBytes_GET_SIZE(value);
        if (len == 0 || (len >= (Py_ssize_t)BEGIN_LEN && memcmp(buf, BEGIN_PREFIX, BEGIN_LEN) == 0))
            return PyList_Append(markers, Py_None);
        EndFields f = {NULL, "", 0, 0, -1, -1, 0, 0, 0};
        if (end_fields(buf, len, &f)) {
            marker = end_marker(&f, seen, marker_type, end_status);
            if (marker == NULL)
                return -1;
            if (marker == Py_None)
                Py_CLEAR(marker);
        }
    }
    if (marker != NULL)
        return append_new(markers, marker);
    if (append_new(odd, PyLong_FromSsize_t(at)) < 0)
        return -1;
    return PyList_Append(markers, Py_None);
}

static PyObject *
ends(PyObject *module, PyObject *args)
{
    PyObject *values, *seen, *end_status;
    PyTypeObject *marker_type;
    if (!PyArg_ParseTuple(args, "OO!O!O:ends", &values, &PyDict_Type, &seen, &PyType_Type,
                          &marker_type, &end_status))
        return NULL;
    if (!PyType_IsSubtype(marker_type, &PyTuple_Type))
        return PyErr_Format(PyExc_TypeError, "ends: marker_type must be a tuple type");
    PyObject *records = PySequence_Fast(values, "ends: values must be a sequence");
    if (records == NULL)
        return NULL;
    PyObject *markers = PyList_New(0), *odd = PyList_New(0), *result = NULL;
    if (markers == NULL || odd == NULL)
        goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(records);
    PyObject **items = PySequence_Fast_ITEMS(records);
    for (Py_ssize_t at = 0; at < count; at++) {
        if (end_record(items[at], at, seen, marker_type, end_status, markers, odd) < 0)
            goto done;
    }
    result = PyTuple_Pack(2, markers, odd);
done:
    Py_DECREF(records);
    Py_XDECREF(markers);
    Py_XDECREF(odd);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "HeldSplit.fast_py's loop; see the module's source."},
    {"ends", ends, METH_VARARGS, "markers.decode_end over records; see the module's source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_holdscan", "The per-record loops of consistent mode, in C.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__holdscan(void)
{
    name_id = PyUnicode_InternFromString("id");
    name_total_order = PyUnicode_InternFromString("total_order");
    if (name_id == NULL || name_total_order == NULL)
        return NULL;
    PyObject *made = PyModule_Create(&module);
    if (made != NULL && PyModule_AddStringConstant(made, "SOURCE_SHA256", HOLDSCAN_SOURCE_SHA256) < 0)
        Py_CLEAR(made);
    return made;
}
