/* The tasks' per-event hold of `transactions: consistent`, in C.
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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "HeldSplit.fast_py's loop; see the module's source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_holdscan", "The tasks' per-event hold, in C.", -1, methods,
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
