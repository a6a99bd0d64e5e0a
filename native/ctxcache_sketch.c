/* ctxcache._native.sketch_add / sketch_min: w-tinylfu's frequency-sketch steps over its own list.
 *
 * src/ctxcache/policies/wtinylfu.py keeps the sketch as a Python list of ints (``_counts``) and each
 * key's counters as a list of indices; an add bumps every counter of a key, an estimate is their
 * minimum. In Python that is ten subscripts and ten in-place adds per step, most of the policy's
 * time in a simulator replay (docs/policies.md, "Speed"). These two do the same steps on the same
 * list, so the policy's state stays what it was (the pure-Python steps remain the fallback and the
 * reference: tests/policies/test_wtinylfu.py runs both).
 *
 * A counter must be an int in [0, 2**62): the sketch only counts up and halves. An index out of
 * range raises IndexError before anything is changed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int check(PyObject *const *args, Py_ssize_t nargs, const char *name) {
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyList_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "%s(counts: list, idx: list)", name);
        return -1;
    }
    Py_ssize_t width = PyList_GET_SIZE(args[0]), n = PyList_GET_SIZE(args[1]);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *o = PyList_GET_ITEM(args[1], j);
        Py_ssize_t i = PyLong_Check(o) ? PyLong_AsSsize_t(o) : -1;
        if (i == -1 && PyErr_Occurred()) return -1;
        if (i < 0 || i >= width) {
            PyErr_SetString(PyExc_IndexError, "sketch index out of range");
            return -1;
        }
        if (!PyLong_CheckExact(PyList_GET_ITEM(args[0], i))) {
            PyErr_SetString(PyExc_TypeError, "sketch counters must be ints");
            return -1;
        }
    }
    return 0;
}

/* sketch_add(counts, idx): counts[i] += 1 for each i in idx (an index listed twice, twice). */
PyObject *ctxcache_sketch_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check(args, nargs, "sketch_add") < 0) return NULL;
    PyObject *counts = args[0], *idx = args[1];
    Py_ssize_t n = PyList_GET_SIZE(idx);
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(idx, j));
        long long v = PyLong_AsLongLong(PyList_GET_ITEM(counts, i));
        if (v == -1 && PyErr_Occurred()) return NULL;
        PyObject *nv = PyLong_FromLongLong(v + 1);
        if (nv == NULL) return NULL;
        PyObject *old = PyList_GET_ITEM(counts, i);
        PyList_SET_ITEM(counts, i, nv);
        Py_DECREF(old);
    }
    Py_RETURN_NONE;
}

/* sketch_min(counts, idx) -> min(counts[i] for i in idx); idx must not be empty. */
PyObject *ctxcache_sketch_min(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check(args, nargs, "sketch_min") < 0) return NULL;
    PyObject *counts = args[0], *idx = args[1];
    Py_ssize_t n = PyList_GET_SIZE(idx);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "sketch_min of no counters");
        return NULL;
    }
    long long best = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(idx, j));
        long long v = PyLong_AsLongLong(PyList_GET_ITEM(counts, i));
        if (v == -1 && PyErr_Occurred()) return NULL;
        if (j == 0 || v < best) best = v;
    }
    return PyLong_FromLongLong(best);
}
