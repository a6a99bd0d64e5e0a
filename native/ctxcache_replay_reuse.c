/* Compiled replay loops of S3-FIFO and LIRS (policies/s3fifo.py, lirs.py: the reference methods
 * and the Python fused loops), as in ctxcache_replay_queues.c: a fresh instance's loop, its
 * containers filled with the state the reference loop leaves. */
#include "ctxcache_replay.h"

/* dict[key] = int value, in the order of `order` (a dict's insertion order). */
static int fill_ints(PyObject *d, const dlist *order, const int32_t *val, const rtrace *t) {
    for (int32_t k = order->head; k >= 0; k = order->next[k]) {
        PyObject *v = PyLong_FromLong(val[k]);
        int rc = v ? PyObject_SetItem(d, RKEY(t, k), v) : -1;
        Py_XDECREF(v);
        if (rc < 0) return -1;
    }
    return 0;
}

/* ---- S3-FIFO: small, main (resident) and ghost queues; freq in the resident keys' order ---- */
enum { S_NONE, S_SMALL, S_MAIN, S_GHOST };

typedef struct {
    dlist small, main, ghost, order; /* order: the freq dict's */
    uint8_t *where;
    int32_t *freq;
    Py_ssize_t main_cap, threshold, top;
} s3_t;

/* evict(None) with something resident: _evict_small, then _evict_main if small gave no victim. */
static void s3_evict(s3_t *S) {
    if (S->small.len && S->main.len <= S->main_cap) {
        for (Py_ssize_t j = 0, m = S->small.len; j < m; j++) {
            int32_t k = dl_pop(&S->small);
            if (S->freq[k] >= S->threshold) {
                dl_push(&S->main, k);
                S->where[k] = S_MAIN;
                S->freq[k] = 0;
            } else {
                dl_unlink(&S->order, k);
                dl_push(&S->ghost, k);
                S->where[k] = S_GHOST;
                return;
            }
        }
    }
    for (Py_ssize_t j = 0, m = (S->top + 1) * S->main.len; j < m; j++) {
        int32_t k = dl_pop(&S->main), f = S->freq[k];
        if (!f) {
            dl_unlink(&S->order, k);
            S->where[k] = S_NONE;
            return;
        }
        S->freq[k] = (f < S->top ? f : (int32_t)S->top) - 1;
        dl_push(&S->main, k);
    }
}

PyObject *ctxcache_replay_s3fifo(PyObject *self, PyObject *args) {
    PyObject *reqs, *small_od, *main_od, *ghost_od, *freq_d, *out = NULL;
    Py_ssize_t capacity, small_cap, ghost_cap;
    s3_t S;
    if (!PyArg_ParseTuple(args, "On(nnn)nnOOOO", &reqs, &capacity, &small_cap, &S.main_cap, &ghost_cap, &S.threshold,
                          &S.top, &small_od, &main_od, &ghost_od, &freq_d))
        return NULL;
    BEGIN_REPLAY(0, 0);
    int32_t *prev = ralloc_ids(U), *next = ralloc_ids(U), *oprev = ralloc_ids(U), *onext = ralloc_ids(U);
    S.where = ralloc(U, 1);
    S.freq = ralloc(U, sizeof(int32_t));
    if (!prev || !next || !oprev || !onext || !S.where || !S.freq) goto done;
    dl_init(&S.small, prev, next);
    dl_init(&S.main, prev, next);
    dl_init(&S.ghost, prev, next);
    dl_init(&S.order, oprev, onext);
    Py_ssize_t misses = 0, resident = 0;
    int evicted = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int32_t b = t.ids[i];
        if (S.where[b] == S_SMALL || S.where[b] == S_MAIN) {
            S.freq[b]++;
            continue;
        }
        misses++;
        if (resident >= capacity) {
            if (S.order.len) {
                evicted = 1;
                s3_evict(&S);
            }
        } else {
            resident++;
        }
        S.freq[b] = 0;
        dl_push(&S.order, b);
        if (S.where[b] == S_GHOST) { /* its id was in the ghost: straight to main */
            dl_unlink(&S.ghost, b);
            dl_push(&S.main, b);
            S.where[b] = S_MAIN;
        } else if (!evicted && S.small.len >= small_cap) {
            dl_push(&S.main, b);
            S.where[b] = S_MAIN;
        } else {
            dl_push(&S.small, b);
            S.where[b] = S_SMALL;
        }
        for (Py_ssize_t j = 0, m = S.ghost.len - ghost_cap; j < m; j++) S.where[dl_pop(&S.ghost)] = S_NONE;
    }
    if (dl_fill(small_od, &S.small, &t) < 0 || dl_fill(main_od, &S.main, &t) < 0 ||
        dl_fill(ghost_od, &S.ghost, &t) < 0 || fill_ints(freq_d, &S.order, S.freq, &t) < 0)
        goto done;
    out = Py_BuildValue("(nO)", misses, evicted ? Py_True : Py_False);
done:
    PyMem_Free(prev);
    PyMem_Free(next);
    PyMem_Free(oprev);
    PyMem_Free(onext);
    PyMem_Free(S.where);
    PyMem_Free(S.freq);
    rtrace_free(&t);
    return out;
}

/* ---- LIRS: the stack S, the queue Q of resident HIR keys, NH (non-resident keys in S) and the
 * status dict (resident keys, in its insertion order); Python's LIR is 0 and HIR 1. ---- */
enum { ST_NONE, ST_LIR, ST_HIR };

typedef struct {
    dlist s, q, nh, order;
    uint8_t *st, *in_s, *in_q, *in_nh;
    Py_ssize_t lirs, lir_limit, s_limit;
} lirs_t;

/* d[key] = None for a key not in it (an OrderedDict keeps a present key's place). */
#define LS_ADD(L, LIST, FLAG, k)          \
    do {                                 \
        if (!(L)->FLAG[k]) {             \
            dl_push(&(L)->LIST, k);      \
            (L)->FLAG[k] = 1;            \
        }                                \
    } while (0)
#define LS_DEL(L, LIST, FLAG, k)          \
    do {                                 \
        dl_unlink(&(L)->LIST, k);        \
        (L)->FLAG[k] = 0;                \
    } while (0)

static inline void l_status(lirs_t *L, int32_t k, uint8_t v) {
    if (!L->st[k]) dl_push(&L->order, k);
    L->st[k] = v;
}

static inline void l_drop_status(lirs_t *L, int32_t k) {
    dl_unlink(&L->order, k);
    L->st[k] = ST_NONE;
}

static void l_prune(lirs_t *L) {
    if (!L->lirs) return;
    while (L->s.len) {
        int32_t k = L->s.head;
        if (L->st[k] == ST_LIR) return;
        LS_DEL(L, s, in_s, k);
        if (L->in_nh[k]) LS_DEL(L, nh, in_nh, k);
    }
}

static void l_demote_bottom(lirs_t *L) {
    if (!L->lirs) return;
    int32_t k = L->s.head;
    LS_DEL(L, s, in_s, k);
    l_status(L, k, ST_HIR);
    L->lirs--;
    LS_ADD(L, q, in_q, k);
    l_prune(L);
}

static inline void l_trim(lirs_t *L) {
    while (L->s.len > L->s_limit && L->nh.len) {
        int32_t k = L->nh.head;
        LS_DEL(L, nh, in_nh, k);
        LS_DEL(L, s, in_s, k);
    }
}

static void l_insert(lirs_t *L, int32_t k) {
    if (L->in_nh[k]) { /* re-used within the stack */
        LS_DEL(L, nh, in_nh, k);
        dl_to_back(&L->s, k);
        l_status(L, k, ST_LIR);
        L->lirs++;
        l_prune(L);
        if (L->lirs > L->lir_limit) l_demote_bottom(L);
    } else if (L->lirs < L->lir_limit) {
        LS_ADD(L, s, in_s, k);
        l_status(L, k, ST_LIR);
        L->lirs++;
        l_prune(L);
    } else {
        LS_ADD(L, s, in_s, k);
        l_status(L, k, ST_HIR);
        LS_ADD(L, q, in_q, k);
    }
    l_trim(L);
}

static void l_hit(lirs_t *L, int32_t k) {
    if (L->st[k] == ST_LIR) {
        int bottom = L->s.head == k;
        dl_to_back(&L->s, k);
        if (bottom) l_prune(L);
    } else if (L->in_s[k]) {
        dl_to_back(&L->s, k);
        LS_DEL(L, q, in_q, k);
        l_status(L, k, ST_LIR);
        L->lirs++;
        l_prune(L);
        if (L->lirs > L->lir_limit) l_demote_bottom(L);
    } else {
        if (L->lirs >= L->lir_limit) l_demote_bottom(L);
        LS_ADD(L, s, in_s, k);
        dl_to_back(&L->q, k);
        l_trim(L);
    }
}

static void l_evict(lirs_t *L) {
    if (L->q.len) {
        int32_t k = L->q.head;
        LS_DEL(L, q, in_q, k);
        l_drop_status(L, k);
        if (L->in_s[k]) LS_ADD(L, nh, in_nh, k);
    } else if (L->lirs) { /* _evict_lir(None): the oldest LIR key */
        int32_t k = L->s.head;
        LS_DEL(L, s, in_s, k);
        l_drop_status(L, k);
        L->lirs--;
        l_prune(L);
    }
}

PyObject *ctxcache_replay_lirs(PyObject *self, PyObject *args) {
    PyObject *reqs, *s_od, *q_od, *nh_od, *status_d, *out = NULL;
    Py_ssize_t capacity;
    lirs_t L;
    if (!PyArg_ParseTuple(args, "OnnnOOOO", &reqs, &capacity, &L.lir_limit, &L.s_limit, &s_od, &q_od, &nh_od,
                          &status_d))
        return NULL;
    BEGIN_REPLAY(0, 0);
    int32_t *ids[8] = {0};
    for (int j = 0; j < 8; j++) ids[j] = ralloc_ids(U);
    L.st = ralloc(U, 4);
    int ok = L.st != NULL;
    for (int j = 0; j < 8; j++) ok = ok && ids[j] != NULL;
    if (!ok) goto done;
    L.in_s = L.st + U;
    L.in_q = L.st + 2 * U;
    L.in_nh = L.st + 3 * U;
    dl_init(&L.s, ids[0], ids[1]);
    dl_init(&L.q, ids[2], ids[3]);
    dl_init(&L.nh, ids[4], ids[5]);
    dl_init(&L.order, ids[6], ids[7]);
    L.lirs = 0;
    Py_ssize_t misses = 0, resident = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int32_t b = t.ids[i];
        if (L.st[b]) {
            l_hit(&L, b);
            continue;
        }
        misses++;
        if (resident >= capacity)
            l_evict(&L);
        else
            resident++;
        l_insert(&L, b);
    }
    if (dl_fill(s_od, &L.s, &t) < 0 || dl_fill(q_od, &L.q, &t) < 0 || dl_fill(nh_od, &L.nh, &t) < 0) goto done;
    int32_t *vals = ids[0]; /* S's prev links are spent: the status values as Python has them */
    for (int32_t k = L.order.head; k >= 0; k = L.order.next[k]) vals[k] = L.st[k] == ST_LIR ? 0 : 1;
    if (fill_ints(status_d, &L.order, vals, &t) < 0) goto done;
    out = Py_BuildValue("(nn)", misses, L.lirs);
done:
    for (int j = 0; j < 8; j++) PyMem_Free(ids[j]);
    PyMem_Free(L.st);
    rtrace_free(&t);
    return out;
}
