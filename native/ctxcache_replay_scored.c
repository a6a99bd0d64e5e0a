/* Compiled replay loops of the lazy-heap policies, Belady and lfu-decay (policies/belady.py,
 * lfu_decay.py, and ScoredPolicy in base.py): every hit or insert pushes (score, seq, key), an
 * eviction pops to the lowest live entry (the key's seq in `entry` is the entry's), and the heap is
 * rebuilt from its live entries once it holds over 2 * len(entry) + 64. The heap moves are heapq's
 * (ctxcache_replay.h), so the list left behind is the reference's, entry for entry. */
#include "ctxcache_replay.h"

#include <limits.h>
#include <math.h>

RHEAP_DEFINE(ihp, int64_t) /* Belady: int scores (minus the next use) */
RHEAP_DEFINE(dhp, double)  /* lfu-decay: float scores */

typedef struct {
    dlist order;   /* the entry dict's (and lfu-decay's _s) insertion order */
    int64_t *eseq; /* the seq of the key's live entry, valid while in_entry */
    uint8_t *in_entry;
    int32_t *prev, *next;
} entries_t;

static int entries_init(entries_t *E, Py_ssize_t U) {
    E->prev = ralloc_ids(U);
    E->next = ralloc_ids(U);
    E->eseq = ralloc(U, sizeof(int64_t));
    E->in_entry = ralloc(U, 1);
    if (!E->prev || !E->next || !E->eseq || !E->in_entry) return -1;
    dl_init(&E->order, E->prev, E->next);
    return 0;
}

static void entries_free(entries_t *E) {
    PyMem_Free(E->prev);
    PyMem_Free(E->next);
    PyMem_Free(E->eseq);
    PyMem_Free(E->in_entry);
}

static inline void entries_set(entries_t *E, int32_t k, int64_t seq) {
    if (!E->in_entry[k]) {
        E->in_entry[k] = 1;
        dl_push(&E->order, k);
    }
    E->eseq[k] = seq;
}

static inline int entries_live(const entries_t *E, int32_t k, int64_t seq) {
    return E->in_entry[k] && E->eseq[k] == seq;
}

static inline void entries_del(entries_t *E, int32_t k) {
    E->in_entry[k] = 0;
    dl_unlink(&E->order, k);
}

/* entry[key] = seq in order, and (with vals) vals_d[key] = float value in the same order. */
static int entries_fill(const entries_t *E, PyObject *entry_d, PyObject *vals_d, const double *vals, const rtrace *t) {
    for (int32_t k = E->order.head; k >= 0; k = E->order.next[k]) {
        PyObject *v = PyLong_FromLongLong(E->eseq[k]);
        int rc = v ? PyObject_SetItem(entry_d, RKEY(t, k), v) : -1;
        Py_XDECREF(v);
        if (rc < 0) return -1;
    }
    for (int32_t k = vals_d ? E->order.head : -1; k >= 0; k = E->order.next[k]) {
        PyObject *v = PyFloat_FromDouble(vals[k]);
        int rc = v ? PyObject_SetItem(vals_d, RKEY(t, k), v) : -1;
        Py_XDECREF(v);
        if (rc < 0) return -1;
    }
    return 0;
}

/* The heap as Python's list of (score, seq, key) tuples; `fscore`: scores are floats. */
#define HEAP_LIST(H, FSCORE, t, out)                                                                    \
    do {                                                                                                \
        out = PyList_New((H)->n);                                                                       \
        for (Py_ssize_t j = 0; out != NULL && j < (H)->n; j++) {                                        \
            PyObject *item = Py_BuildValue(FSCORE ? "(dLO)" : "(LLO)", (H)->a[j].s, (long long)(H)->a[j].seq, \
                                           RKEY(t, (H)->a[j].key));                                    \
            if (item == NULL) Py_CLEAR(out);                                                            \
            else PyList_SET_ITEM(out, j, item);                                                         \
        }                                                                                               \
    } while (0)

/* Keep the live entries, in their order, and heapify them (the reference's compaction). */
#define HEAP_COMPACT(H, E, NAME)                                                                        \
    do {                                                                                                \
        Py_ssize_t w_ = 0;                                                                              \
        for (Py_ssize_t j = 0; j < (H)->n; j++)                                                         \
            if (entries_live(E, (H)->a[j].key, (H)->a[j].seq)) (H)->a[w_++] = (H)->a[j];               \
        (H)->n = w_;                                                                                    \
        NAME##_heapify(H);                                                                              \
    } while (0)

/* ---- Belady: score = -next use of this access; `fut` the policy's _future list ---- */
PyObject *ctxcache_replay_belady(PyObject *self, PyObject *args) {
    PyObject *reqs, *fut, *entry_d, *out = NULL, *heap_list = NULL;
    Py_ssize_t capacity;
    long long seq0;
    if (!PyArg_ParseTuple(args, "OnO!LO", &reqs, &capacity, &PyList_Type, &fut, &seq0, &entry_d)) return NULL;
    BEGIN_REPLAY(0, 0);
    if (t.n > PyList_GET_SIZE(fut)) { /* the reference would raise: let it */
        rtrace_free(&t);
        Py_RETURN_NONE;
    }
    entries_t E = {0};
    ihp_t H = {NULL, 0, 0};
    int64_t *score = PyMem_Malloc((size_t)(t.n ? t.n : 1) * sizeof(int64_t));
    if (score == NULL) PyErr_NoMemory();
    if (score == NULL || entries_init(&E, U) < 0) goto done;
    for (Py_ssize_t i = 0; i < t.n; i++) { /* read up front: an odd future leaves it to Python */
        PyObject *v = PyList_GET_ITEM(fut, i);
        int overflow = 0;
        long long x = PyLong_CheckExact(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : 0;
        if (!PyLong_CheckExact(v) || overflow || x < -LLONG_MAX) {
            PyErr_Clear();
            out = Py_None;
            Py_INCREF(out);
            goto done;
        }
        score[i] = -x;
    }
    Py_ssize_t misses = 0, resident = 0;
    int64_t seq = seq0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int32_t b = t.ids[i];
        if (!E.in_entry[b]) {
            misses++;
            if (resident >= capacity) {
                while (H.n) { /* the furthest next use; stale entries dropped */
                    ihp_e x = ihp_pop(&H);
                    if (entries_live(&E, x.key, x.seq)) {
                        entries_del(&E, x.key);
                        break;
                    }
                }
            } else {
                resident++;
            }
        }
        entries_set(&E, b, seq);
        if (ihp_push(&H, (ihp_e){score[i], seq, b}) < 0) goto done;
        seq++;
        if (H.n > 2 * E.order.len + 64) HEAP_COMPACT(&H, &E, ihp);
    }
    if (entries_fill(&E, entry_d, NULL, NULL, &t) < 0) goto done;
    HEAP_LIST(&H, 0, &t, heap_list);
    if (heap_list == NULL) goto done;
    out = Py_BuildValue("(nNLn)", misses, heap_list, (long long)seq, t.n);
done:
    PyMem_Free(score);
    PyMem_Free(H.a);
    entries_free(&E);
    rtrace_free(&t);
    return out;
}

/* ---- lfu-decay: score S = hits * exp(decay * (last use - t0)); t0 moves (rebase) before
 * decay * (now - t0) passes 600, rescaling every S ---- */
typedef struct {
    double decay, t0, now, growth;
    int has_t0;
    double *s; /* _s, per resident key */
} decay_t;

static double decay_factor(decay_t *D, entries_t *E, dhp_t *H, double now) {
    if (now != D->now) { /* _factor */
        if (!D->has_t0) {
            D->t0 = now;
            D->has_t0 = 1;
        } else if (D->decay * (now - D->t0) > 600.0) { /* _rebase */
            double shrink = exp(-D->decay * (now - D->t0));
            D->t0 = now;
            for (int32_t k = E->order.head; k >= 0; k = E->order.next[k]) D->s[k] = D->s[k] * shrink;
            Py_ssize_t w = 0;
            for (Py_ssize_t j = 0; j < H->n; j++) {
                dhp_e x = H->a[j];
                if (entries_live(E, x.key, x.seq)) {
                    x.s = D->s[x.key];
                    H->a[w++] = x;
                }
            }
            H->n = w;
            dhp_heapify(H);
        }
        D->now = now;
        D->growth = exp(D->decay * (now - D->t0));
    }
    return D->growth;
}

PyObject *ctxcache_replay_lfu_decay(PyObject *self, PyObject *args) {
    PyObject *reqs, *entry_d, *s_d, *t0_obj, *out = NULL, *heap_list = NULL;
    Py_ssize_t capacity;
    long long seq0;
    decay_t D;
    if (!PyArg_ParseTuple(args, "OndLOOOdd", &reqs, &capacity, &D.decay, &seq0, &entry_d, &s_d, &t0_obj, &D.now,
                          &D.growth))
        return NULL;
    D.has_t0 = t0_obj != Py_None;
    D.t0 = D.has_t0 ? PyFloat_AsDouble(t0_obj) : 0.0;
    if (D.t0 == -1.0 && PyErr_Occurred()) return NULL;
    BEGIN_REPLAY(1, 0);
    entries_t E = {0};
    dhp_t H = {NULL, 0, 0};
    D.s = ralloc(U, sizeof(double));
    if (D.s == NULL || entries_init(&E, U) < 0) goto done;
    Py_ssize_t misses = 0, resident = 0;
    int64_t seq = seq0;
    for (Py_ssize_t r = 0; r < t.nreq; r++) {
        double now = t.time[r];
        for (Py_ssize_t i = t.start[r]; i < t.start[r + 1]; i++) {
            int32_t b = t.ids[i];
            int hit = E.in_entry[b];
            if (!hit) {
                misses++;
                if (resident >= capacity) {
                    while (H.n) { /* _find: the lowest live entry */
                        dhp_e x = dhp_pop(&H);
                        if (entries_live(&E, x.key, x.seq)) {
                            entries_del(&E, x.key);
                            break;
                        }
                    }
                } else {
                    resident++;
                }
            }
            double g = decay_factor(&D, &E, &H, now);
            double v = hit ? D.s[b] + g : g;
            D.s[b] = v;
            entries_set(&E, b, seq);
            if (dhp_push(&H, (dhp_e){v, seq, b}) < 0) goto done;
            seq++;
            if (H.n > 2 * E.order.len + 64) HEAP_COMPACT(&H, &E, dhp);
        }
    }
    if (entries_fill(&E, entry_d, s_d, D.s, &t) < 0) goto done;
    HEAP_LIST(&H, 1, &t, heap_list);
    if (heap_list == NULL) goto done;
    PyObject *t0 = D.has_t0 ? PyFloat_FromDouble(D.t0) : (Py_INCREF(Py_None), Py_None);
    if (t0 != NULL) out = Py_BuildValue("(nNLNdd)", misses, heap_list, (long long)seq, t0, D.now, D.growth);
    else Py_DECREF(heap_list);
done:
    PyMem_Free(D.s);
    PyMem_Free(H.a);
    entries_free(&E);
    rtrace_free(&t);
    return out;
}
