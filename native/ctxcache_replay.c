/* The simulator's compiled replay loops: the trace loader, the shared helpers and the module's
 * replay_* functions (ctxcache_replay.h says what they share; each policy's loop is in
 * ctxcache_replay_queues.c, ctxcache_replay_scored.c, ctxcache_replay_wtinylfu.c or
 * ctxcache_replay_prefix.c). */
#include "ctxcache_replay.h"

#include <string.h>

#define SMALL_IDS ((long long)1 << 26) /* exact ints below this map to ids through an array */

static PyObject *str_time, *str_blocks;

void *ralloc(Py_ssize_t n, size_t size) {
    void *p = PyMem_Calloc(n > 0 ? (size_t)n : 1, size);
    if (p == NULL) PyErr_NoMemory();
    return p;
}

int32_t *ralloc_ids(Py_ssize_t n) {
    int32_t *p = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof(int32_t));
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memset(p, 0xff, (n > 0 ? (size_t)n : 1) * sizeof(int32_t));
    return p;
}

void rtrace_free(rtrace *t) {
    PyMem_Free(t->ids);
    PyMem_Free(t->start);
    PyMem_Free(t->time);
    Py_CLEAR(t->keys);
    t->ids = NULL;
    t->start = NULL;
    t->time = NULL;
}

typedef struct {
    int32_t *small; /* exact int v -> id, or -1; while every key so far was one */
    Py_ssize_t small_cap;
    PyObject *map; /* key -> id for every key, once one was not a small exact int */
} idmap;

/* Switch to the dict: every key seen so far goes in with its id. */
static int idmap_to_dict(idmap *m, PyObject *keys) {
    m->map = PyDict_New();
    if (m->map == NULL) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *id = PyLong_FromSsize_t(i);
        int rc = id ? PyDict_SetItem(m->map, PyList_GET_ITEM(keys, i), id) : -1;
        Py_XDECREF(id);
        if (rc < 0) return -1;
    }
    PyMem_Free(m->small);
    m->small = NULL;
    return 0;
}

/* The id of key (a new one is appended to keys): >= 0, -1 with an exception, -2 not supported. */
static int32_t idmap_get(idmap *m, PyObject *keys, PyObject *key, int ints_only) {
    Py_ssize_t u = PyList_GET_SIZE(keys);
    int overflow = 0;
    long long v = PyLong_CheckExact(key) ? PyLong_AsLongLongAndOverflow(key, &overflow) : -1;
    if (v == -1 && PyErr_Occurred()) return -1;
    if (ints_only && (!PyLong_CheckExact(key) || overflow || v < 0)) return -2;
    if (u >= INT32_MAX - 1) return -2;
    if (m->map == NULL && PyLong_CheckExact(key) && !overflow && v >= 0 && v < SMALL_IDS) {
        if (v >= m->small_cap) {
            Py_ssize_t cap = m->small_cap ? m->small_cap : 1024;
            while (cap <= v) cap *= 2;
            int32_t *s = PyMem_Realloc(m->small, (size_t)cap * sizeof(int32_t));
            if (s == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            memset(s + m->small_cap, 0xff, (size_t)(cap - m->small_cap) * sizeof(int32_t));
            m->small = s;
            m->small_cap = cap;
        }
        int32_t id = m->small[v];
        if (id < 0) {
            if (PyList_Append(keys, key) < 0) return -1;
            id = m->small[v] = (int32_t)u;
        }
        return id;
    }
    if (m->map == NULL && idmap_to_dict(m, keys) < 0) return -1;
    PyObject *got = PyDict_GetItemWithError(m->map, key);
    if (got != NULL) return (int32_t)PyLong_AsLong(got);
    if (PyErr_Occurred()) return -1;
    PyObject *id = PyLong_FromSsize_t(u);
    int rc = id ? PyDict_SetItem(m->map, key, id) : -1;
    Py_XDECREF(id);
    if (rc < 0 || PyList_Append(keys, key) < 0) return -1;
    return (int32_t)u;
}

/* One request: its time (want_time) and its blocks' ids appended. 0, -1 or 1 (not supported). */
static int load_request(rtrace *t, idmap *m, PyObject *req, Py_ssize_t r, Py_ssize_t *cap, int want_time,
                        int ints_only) {
    if (want_time) {
        PyObject *tm = PyObject_GetAttr(req, str_time);
        if (tm == NULL) return -1;
        /* a float (numpy's float64 is one), or an int a double holds exactly: then the steps
         * Python takes in ints (now - t0) come out the same in doubles */
        double d = -1.0;
        int is_float = PyFloat_Check(tm), ok = is_float || PyLong_Check(tm);
        if (ok) d = PyFloat_AsDouble(tm);
        Py_DECREF(tm);
        if (ok && d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            ok = 0;
        }
        if (!ok || (!is_float && (d > 9007199254740992.0 || d < -9007199254740992.0))) return 1;
        t->time[r] = d;
    }
    PyObject *blocks = PyObject_GetAttr(req, str_blocks);
    if (blocks == NULL) return -1;
    PyObject *seq = PySequence_Fast(blocks, "a request's blocks must be a sequence");
    Py_DECREF(blocks);
    if (seq == NULL) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (t->n + k > *cap) {
        while (t->n + k > *cap) *cap *= 2;
        int32_t *ids = PyMem_Realloc(t->ids, (size_t)*cap * sizeof(int32_t));
        if (ids == NULL) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        t->ids = ids;
    }
    int rc = 0;
    for (Py_ssize_t j = 0; j < k; j++) {
        /* the items of a tuple or list, re-read each step: a key's __eq__ may change a list */
        if (j >= PySequence_Fast_GET_SIZE(seq)) break;
        PyObject *key = PySequence_Fast_GET_ITEM(seq, j);
        Py_INCREF(key);
        int32_t id = idmap_get(m, t->keys, key, ints_only);
        Py_DECREF(key);
        if (id < 0) {
            rc = id == -2 ? 1 : -1;
            break;
        }
        t->ids[t->n++] = id;
    }
    Py_DECREF(seq);
    return rc;
}

int rtrace_load(rtrace *t, PyObject *reqs, int want_time, int ints_only) {
    memset(t, 0, sizeof *t);
    if (!PyList_CheckExact(reqs)) return 1;
    Py_ssize_t nreq = PyList_GET_SIZE(reqs), cap = 1024;
    idmap m = {NULL, 0, NULL};
    t->start = PyMem_Malloc((size_t)(nreq + 1) * sizeof(Py_ssize_t));
    t->time = want_time ? PyMem_Malloc((size_t)(nreq ? nreq : 1) * sizeof(double)) : NULL;
    t->ids = PyMem_Malloc((size_t)cap * sizeof(int32_t));
    t->keys = PyList_New(0);
    int rc = 0;
    if (t->start == NULL || (want_time && t->time == NULL) || t->ids == NULL) {
        PyErr_NoMemory();
        rc = -1;
    } else if (t->keys == NULL) {
        rc = -1;
    }
    for (Py_ssize_t r = 0; rc == 0 && r < nreq; r++) {
        if (r >= PyList_GET_SIZE(reqs)) {
            rc = 1; /* the list shrank under us (a key's __eq__): let Python replay it */
            break;
        }
        PyObject *req = PyList_GET_ITEM(reqs, r);
        Py_INCREF(req);
        t->start[r] = t->n;
        rc = load_request(t, &m, req, r, &cap, want_time, ints_only);
        Py_DECREF(req);
    }
    if (rc == 0) {
        t->nreq = nreq;
        t->start[nreq] = t->n;
    }
    PyMem_Free(m.small);
    Py_XDECREF(m.map);
    return rc;
}

int dl_fill(PyObject *od, const dlist *l, const rtrace *t) {
    for (int32_t k = l->head; k >= 0; k = l->next[k])
        if (PyObject_SetItem(od, RKEY(t, k), Py_None) < 0) return -1;
    return 0;
}

/* ---- module --------------------------------------------------------------------------------- */

PyObject *ctxcache_replay_2q(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_arc(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_lfu(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_s3fifo(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_lirs(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_belady(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_lfu_decay(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_wtinylfu(PyObject *self, PyObject *args);
PyObject *ctxcache_replay_prefix_aware(PyObject *self, PyObject *args);

static PyMethodDef replay_methods[] = {
    {"replay_2q", ctxcache_replay_2q, METH_VARARGS,
     "replay_2q(requests, capacity, kin, kout, ain, aout, am) -> misses, or None"},
    {"replay_arc", ctxcache_replay_arc, METH_VARARGS,
     "replay_arc(requests, capacity, c, p, t1, t2, b1, b2) -> (misses, p), or None"},
    {"replay_lfu", ctxcache_replay_lfu, METH_VARARGS,
     "replay_lfu(requests, capacity, count, buckets, bucket_type) -> (misses, min), or None"},
    {"replay_s3fifo", ctxcache_replay_s3fifo, METH_VARARGS,
     "replay_s3fifo(requests, capacity, limits, move_threshold, max_freq, small, main, ghost, freq) -> (misses, "
     "evicted), or None"},
    {"replay_lirs", ctxcache_replay_lirs, METH_VARARGS,
     "replay_lirs(requests, capacity, lir_limit, s_limit, s, q, nh, status) -> (misses, lirs), or None"},
    {"replay_belady", ctxcache_replay_belady, METH_VARARGS,
     "replay_belady(requests, capacity, future, seq0, entry) -> (misses, heap, next seq, accesses), or None"},
    {"replay_lfu_decay", ctxcache_replay_lfu_decay, METH_VARARGS,
     "replay_lfu_decay(requests, capacity, decay, seq0, entry, s, t0, now, growth) -> (misses, heap, next seq, t0, "
     "now, growth), or None"},
    {"replay_wtinylfu", ctxcache_replay_wtinylfu, METH_VARARGS,
     "replay_wtinylfu(requests, capacity, sizes, width, depth, halve_at, fast, doorkeeper, win, prob, prot, doomed, "
     "idx) -> (misses, counts, door, main_hits, mv, blocks, top, strikes), or None"},
    {"replay_prefix_aware", ctxcache_replay_prefix_aware, METH_VARARGS,
     "replay_prefix_aware(requests, capacity, params, classes, mid, seq0, meta, ghost) -> (misses, state), or None"},
    {NULL, NULL, 0, NULL},
};

int ctxcache_add_replay(PyObject *m) {
    str_time = PyUnicode_InternFromString("time");
    str_blocks = PyUnicode_InternFromString("blocks");
    if (str_time == NULL || str_blocks == NULL) return -1;
    return PyModule_AddFunctions(m, replay_methods);
}
