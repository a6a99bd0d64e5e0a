/* The simulator's compiled replay loops (docs/ARCHITECTURE.md, "Fused simulator loops"): what
 * ctxcache_replay*.c share. Each replay_<policy> function runs Policy.replay_object's loop for one
 * policy over a fresh (empty) instance's state and writes the state the reference loop
 * (policies/replay.py) would leave into the instance's own containers; the Python fused loop or
 * the reference stays the fallback (tests/sim/test_replay_fused.py checks both against it).
 *
 * The trace is read once (rtrace_load): every key gets a dense id 0..U-1 in order of first access
 * (exact ints below 2**26 through an array, anything else through a dict, so ids follow Python's
 * equality), and the policies keep their queues as doubly linked lists over those ids. */
#ifndef CTXCACHE_REPLAY_H
#define CTXCACHE_REPLAY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    int32_t *ids;      /* the dense id of each access, in trace order */
    Py_ssize_t n;      /* accesses */
    Py_ssize_t *start; /* request r's accesses are ids[start[r] .. start[r + 1]) */
    double *time;      /* request r's time (only with want_time) */
    Py_ssize_t nreq;
    PyObject *keys;    /* list: dense id -> the key as first seen */
} rtrace;

/* Load a list of requests (``.time``, ``.blocks``). ints_only: every key must be an exact int in
 * [0, 2**63), else 1 is returned. Returns 0, 1 (not supported here, no exception: the caller
 * returns None and Python runs its own loop) or -1 (exception set). */
int rtrace_load(rtrace *t, PyObject *reqs, int want_time, int ints_only);
void rtrace_free(rtrace *t);
/* A replay function's start: ``rtrace t`` loaded from ``reqs`` and ``U`` its number of keys, or
 * the function returns: NULL on an error, None where the compiled loop declines (Python runs its). */
#define BEGIN_REPLAY(WANT_TIME, INTS_ONLY)                   \
    rtrace t;                                                \
    int rc_ = rtrace_load(&t, reqs, (WANT_TIME), (INTS_ONLY)); \
    if (rc_) {                                               \
        rtrace_free(&t);                                     \
        if (rc_ < 0) return NULL;                            \
        Py_RETURN_NONE;                                      \
    }                                                        \
    Py_ssize_t U = PyList_GET_SIZE(t.keys)
/* The key of dense id k (borrowed). */
#define RKEY(t, k) PyList_GET_ITEM((t)->keys, (k))

/* ---- doubly linked lists over dense ids (an OrderedDict's order); lists whose keys never meet
 * share prev/next arrays. An empty list has head == tail == -1. ---- */
typedef struct {
    int32_t *prev, *next;
    int32_t head, tail;
    Py_ssize_t len;
} dlist;

static inline void dl_init(dlist *l, int32_t *prev, int32_t *next) {
    l->prev = prev;
    l->next = next;
    l->head = l->tail = -1;
    l->len = 0;
}

static inline void dl_push(dlist *l, int32_t k) {
    l->prev[k] = l->tail;
    l->next[k] = -1;
    if (l->tail >= 0)
        l->next[l->tail] = k;
    else
        l->head = k;
    l->tail = k;
    l->len++;
}

static inline void dl_unlink(dlist *l, int32_t k) {
    int32_t p = l->prev[k], n = l->next[k];
    if (p >= 0)
        l->next[p] = n;
    else
        l->head = n;
    if (n >= 0)
        l->prev[n] = p;
    else
        l->tail = p;
    l->len--;
}

static inline int32_t dl_pop(dlist *l) {
    int32_t k = l->head;
    dl_unlink(l, k);
    return k;
}

static inline void dl_to_back(dlist *l, int32_t k) {
    if (l->tail != k) {
        dl_unlink(l, k);
        dl_push(l, k);
    }
}

/* od[key] = None for each key of l, front first (od: an empty OrderedDict or dict). */
int dl_fill(PyObject *od, const dlist *l, const rtrace *t);

/* Arrays for a replay (freed with PyMem_Free): ralloc zeroed, ralloc_ids filled with -1; NULL
 * with MemoryError set. */
void *ralloc(Py_ssize_t n, size_t size);
int32_t *ralloc_ids(Py_ssize_t n);

/* ---- binary heaps with heapq's exact moves (Modules/_heapqmodule.c: the same sift order, so the
 * same list at every step) over (score, seq, key) entries; seqs are unique, so the key never
 * decides a comparison, as in the tuples Python compares. ---- */
#define RHEAP_DEFINE(NAME, STYPE)                                                                    \
    typedef struct {                                                                                 \
        STYPE s;                                                                                     \
        int64_t seq;                                                                                 \
        int32_t key;                                                                                 \
    } NAME##_e;                                                                                      \
    typedef struct {                                                                                 \
        NAME##_e *a;                                                                                 \
        Py_ssize_t n, cap;                                                                           \
    } NAME##_t;                                                                                      \
    static inline int NAME##_lt(const NAME##_e *x, const NAME##_e *y) {                             \
        return x->s < y->s || (x->s == y->s && x->seq < y->seq);                                     \
    }                                                                                                \
    static inline void NAME##_siftdown(NAME##_t *h, Py_ssize_t start, Py_ssize_t pos) {              \
        NAME##_e item = h->a[pos];                                                                   \
        while (pos > start) {                                                                        \
            Py_ssize_t parent = (pos - 1) >> 1;                                                      \
            if (!NAME##_lt(&item, &h->a[parent])) break;                                             \
            h->a[pos] = h->a[parent];                                                                \
            pos = parent;                                                                            \
        }                                                                                            \
        h->a[pos] = item;                                                                            \
    }                                                                                                \
    static inline void NAME##_siftup(NAME##_t *h, Py_ssize_t pos) {                                  \
        Py_ssize_t end = h->n, start = pos, limit = end >> 1;                                        \
        NAME##_e item = h->a[pos];                                                                   \
        while (pos < limit) {                                                                        \
            Py_ssize_t child = 2 * pos + 1;                                                          \
            if (child + 1 < end && !NAME##_lt(&h->a[child], &h->a[child + 1])) child++;              \
            h->a[pos] = h->a[child];                                                                 \
            pos = child;                                                                             \
        }                                                                                            \
        h->a[pos] = item;                                                                            \
        NAME##_siftdown(h, start, pos);                                                              \
    }                                                                                                \
    static inline int NAME##_push(NAME##_t *h, NAME##_e e) {                                         \
        if (h->n == h->cap) {                                                                        \
            Py_ssize_t cap = h->cap ? 2 * h->cap : 64;                                               \
            NAME##_e *a = PyMem_Realloc(h->a, (size_t)cap * sizeof(NAME##_e));                       \
            if (a == NULL) {                                                                         \
                PyErr_NoMemory();                                                                    \
                return -1;                                                                           \
            }                                                                                        \
            h->a = a;                                                                                \
            h->cap = cap;                                                                            \
        }                                                                                            \
        h->a[h->n++] = e;                                                                            \
        NAME##_siftdown(h, 0, h->n - 1);                                                             \
        return 0;                                                                                    \
    }                                                                                                \
    static inline NAME##_e NAME##_pop(NAME##_t *h) { /* h->n > 0 */                                  \
        NAME##_e last = h->a[--h->n];                                                                \
        if (h->n == 0) return last;                                                                  \
        NAME##_e top = h->a[0];                                                                      \
        h->a[0] = last;                                                                              \
        NAME##_siftup(h, 0);                                                                         \
        return top;                                                                                  \
    }                                                                                                \
    static inline void NAME##_heapify(NAME##_t *h) {                                                 \
        for (Py_ssize_t i = h->n / 2 - 1; i >= 0; i--) NAME##_siftup(h, i);                          \
    }

#endif
