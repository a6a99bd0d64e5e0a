/* The compiled replay loop of W-TinyLFU (policies/wtinylfu.py holds the reference methods): the
 * window, probation, protected and doomed queues, the count sketch (and doorkeeper), the main
 * victim's cached estimate (_mv) and the cache of precomputed counter blocks (_blocks, _top,
 * _strikes), stepped as on_hit / evict(None) / on_insert step them, over a fresh instance whose
 * keys are ints in [0, 2**63) (a key's counters: XXH64 of its 8 little-endian bytes). */
#include "ctxcache_replay.h"

#include <string.h>

#define XXH_INLINE_ALL
#include "xxhash.h"

#define SEED_A 0x12345678u
#define SEED_B 0x12344321u

enum { W_NONE, W_WIN, W_PROB, W_PROT, W_DOOMED };

typedef struct {
    dlist win, prob, prot, doomed, order; /* order: the _idx dict's */
    uint8_t *where, *has_idx, *door;      /* door: NULL without the doorkeeper */
    uint32_t *idx;                        /* depth counters per key, once computed */
    int64_t *counts;
    Py_ssize_t width, depth, mn, prob_max, prot_max, halve_at, main_hits;
    int fast, mv_valid, strikes, nblocks;
    int32_t mv_key;
    int64_t mv_est, top, blocks[5];
    const rtrace *t;
} wt_t;

/* WTinyLFU._indices' values for the int v (the block path gives the same numbers). */
static void wt_indices(const wt_t *W, uint64_t v, uint32_t *out) {
    uint8_t data[8];
    for (int j = 0; j < 8; j++) data[j] = (uint8_t)(v >> (8 * j));
    uint64_t a = XXH64(data, 8, SEED_A) & 0xFFFFFFFFu, b = XXH64(data, 8, SEED_B) & 0xFFFFFFFFu;
    out[0] = (uint32_t)(a % (uint64_t)W->width);
    for (Py_ssize_t i = 1; i < W->depth; i++) {
        a = (a + b) & 0xFFFFFFFFu;
        out[i] = (uint32_t)(a % (uint64_t)W->width);
    }
}

static inline uint64_t wt_value(const wt_t *W, int32_t k) {
    return (uint64_t)PyLong_AsLongLong(RKEY(W->t, k)); /* rtrace_load checked: an int in [0, 2**63) */
}

static inline const uint32_t *wt_idx(wt_t *W, int32_t k) {
    uint32_t *out = W->idx + (size_t)k * (size_t)W->depth;
    if (!W->has_idx[k]) {
        wt_indices(W, wt_value(W, k), out);
        W->has_idx[k] = 1;
    }
    return out;
}

static void wt_add(wt_t *W, int32_t k) {
    const uint32_t *ix = wt_idx(W, k);
    if (W->door != NULL) {
        int all = 1;
        for (Py_ssize_t i = 0; i < W->depth && all; i++) all = W->door[ix[i]] != 0;
        if (!all) {
            for (Py_ssize_t i = 0; i < W->depth; i++) W->door[ix[i]] = 1;
            return;
        }
    }
    for (Py_ssize_t i = 0; i < W->depth; i++) W->counts[ix[i]]++;
}

static int64_t wt_min(wt_t *W, int32_t k) {
    const uint32_t *ix = wt_idx(W, k);
    int64_t m = W->counts[ix[0]];
    for (Py_ssize_t i = 1; i < W->depth; i++)
        if (W->counts[ix[i]] < m) m = W->counts[ix[i]];
    return m;
}

static int64_t wt_estimate(wt_t *W, int32_t k) {
    int64_t est = wt_min(W, k);
    if (W->door != NULL) {
        const uint32_t *ix = wt_idx(W, k);
        int all = 1;
        for (Py_ssize_t i = 0; i < W->depth && all; i++) all = W->door[ix[i]] != 0;
        est += all;
    }
    return est;
}

static inline void wt_move(wt_t *W, dlist *from, dlist *to, int32_t k, uint8_t where) {
    dl_unlink(from, k);
    dl_push(to, k);
    W->where[k] = where;
}

static void wt_to_main(wt_t *W, int32_t k) {
    if (W->prob.len < W->prob_max || W->prot.len >= W->prot_max) {
        dl_push(&W->prob, k);
        W->where[k] = W_PROB;
    } else {
        dl_push(&W->prot, k);
        W->where[k] = W_PROT;
    }
}

static void wt_forget(wt_t *W, dlist *from, int32_t k) {
    dl_unlink(from, k);
    dl_unlink(&W->order, k);
    W->where[k] = W_NONE;
}

static void wt_insert(wt_t *W, int32_t k) {
    int64_t n = (int64_t)(wt_value(W, k) >> 8);
    int cached = 0;
    for (int j = 0; j < W->nblocks; j++) cached |= W->blocks[j] == n;
    if (!cached && n > W->top && W->strikes < 8) { /* _indices computes and keeps this block */
        W->strikes += n > W->top + 1 && W->top >= 0;
        W->top = n;
        W->blocks[W->nblocks++] = n;
        if (W->nblocks > 4) {
            memmove(W->blocks, W->blocks + 1, 4 * sizeof(int64_t));
            W->nblocks = 4;
        }
    }
    dl_push(&W->order, k);
    dl_push(&W->win, k);
    W->where[k] = W_WIN;
    wt_add(W, k);
}

static void wt_hit(wt_t *W, int32_t k) {
    switch (W->where[k]) {
    case W_WIN:
        dl_to_back(&W->win, k);
        return;
    case W_PROT:
        dl_to_back(&W->prot, k);
        break;
    case W_PROB:
        wt_move(W, &W->prob, &W->prot, k, W_PROT);
        if (W->prot.len > W->prot_max) {
            int32_t x = dl_pop(&W->prot);
            dl_push(&W->prob, x);
            W->where[x] = W_PROB;
            if (W->prob.len > W->prob_max) {
                int32_t d = dl_pop(&W->prob);
                dl_push(&W->doomed, d);
                W->where[d] = W_DOOMED;
            }
        }
        break;
    case W_DOOMED: /* libCacheSim dropped it already: back to the window */
        wt_move(W, &W->doomed, &W->win, k, W_WIN);
        wt_add(W, k);
        return;
    default:
        return;
    }
    wt_add(W, k);
    if (++W->main_hits >= W->halve_at) {
        W->main_hits = 0;
        W->mv_valid = 0;
        for (Py_ssize_t i = 0; i < W->width; i++) W->counts[i] >>= 1;
        if (W->door != NULL) memset(W->door, 0, (size_t)W->width);
    }
}

/* _evict_fast: 1 when it decided (a victim, or none), 0 when the general step must. */
static int wt_evict_fast(wt_t *W) {
    while (W->win.len && W->prob.len + W->prot.len < W->mn) {
        int32_t w = W->win.head;
        wt_add(W, w);
        dl_unlink(&W->win, w);
        wt_to_main(W, w);
    }
    if (!W->win.len) return 0;
    int32_t w = W->win.head;
    dlist *seg = W->prob.len ? &W->prob : &W->prot;
    int32_t m = seg->head;
    int64_t west = wt_min(W, w);
    int admit = !W->mv_valid || W->mv_key != m || west > W->mv_est;
    if (admit) {
        int64_t mest = wt_min(W, m);
        W->mv_valid = 1;
        W->mv_key = m;
        W->mv_est = mest;
        admit = west > mest;
    }
    const uint32_t *ix = wt_idx(W, w); /* the window key's add comes after the comparison */
    for (Py_ssize_t i = 0; i < W->depth; i++) W->counts[ix[i]]++;
    dl_unlink(&W->win, w);
    if (admit) {
        wt_forget(W, seg, m);
        wt_to_main(W, w);
    } else {
        dl_unlink(&W->order, w);
        W->where[w] = W_NONE;
    }
    return 1;
}

static void wt_evict_general(wt_t *W) {
    if (W->doomed.len) {
        wt_forget(W, &W->doomed, W->doomed.head);
        return;
    }
    while (W->win.len) { /* nothing is refused here: the first pass decides */
        int32_t w = W->win.head;
        if (W->prob.len + W->prot.len < W->mn) {
            wt_add(W, w);
            dl_unlink(&W->win, w);
            wt_to_main(W, w);
            continue;
        }
        int32_t m = W->prob.len ? W->prob.head : W->prot.len ? W->prot.head : -1;
        int admit = m >= 0 && wt_estimate(W, w) > wt_estimate(W, m);
        wt_add(W, w);
        if (admit) {
            wt_forget(W, W->where[m] == W_PROB ? &W->prob : &W->prot, m);
            dl_unlink(&W->win, w);
            wt_to_main(W, w);
        } else {
            wt_forget(W, &W->win, w);
        }
        return;
    }
    int32_t m = W->prob.len ? W->prob.head : W->prot.len ? W->prot.head : -1;
    if (m >= 0) wt_forget(W, W->where[m] == W_PROB ? &W->prob : &W->prot, m);
}

/* The ints of a counter list: [idx[0], ..., idx[depth - 1]]. */
static PyObject *wt_list(const wt_t *W, const uint32_t *ix) {
    PyObject *l = PyList_New(W->depth);
    for (Py_ssize_t i = 0; l != NULL && i < W->depth; i++) {
        PyObject *v = PyLong_FromUnsignedLong(ix[i]);
        if (v == NULL) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, v);
    }
    return l;
}

/* _blocks: block number -> the counter lists of its 256 ids, oldest block first. */
static PyObject *wt_blocks(const wt_t *W) {
    PyObject *d = PyDict_New();
    uint32_t *ix = PyMem_Malloc((size_t)W->depth * sizeof(uint32_t));
    if (ix == NULL) PyErr_NoMemory();
    for (int j = 0; d != NULL && ix != NULL && j < W->nblocks; j++) {
        PyObject *block = PyList_New(256), *n = PyLong_FromLongLong(W->blocks[j]);
        for (int i = 0; block != NULL && i < 256; i++) {
            wt_indices(W, ((uint64_t)W->blocks[j] << 8) + (uint64_t)i, ix);
            PyObject *l = wt_list(W, ix);
            if (l == NULL) Py_CLEAR(block);
            else PyList_SET_ITEM(block, i, l);
        }
        if (block == NULL || n == NULL || PyDict_SetItem(d, n, block) < 0) Py_CLEAR(d);
        Py_XDECREF(block);
        Py_XDECREF(n);
    }
    PyMem_Free(ix);
    if (ix == NULL) Py_CLEAR(d);
    return d;
}

/* (misses, counts, door, main_hits, mv, blocks, top, strikes), the queues and _idx filled. */
static PyObject *wt_result(wt_t *W, Py_ssize_t misses, PyObject *const *ods, PyObject *idx_d) {
    const dlist *qs[4] = {&W->win, &W->prob, &W->prot, &W->doomed};
    for (int j = 0; j < 4; j++)
        if (dl_fill(ods[j], qs[j], W->t) < 0) return NULL;
    for (int32_t k = W->order.head; k >= 0; k = W->order.next[k]) {
        PyObject *l = wt_list(W, wt_idx(W, k));
        int rc = l ? PyObject_SetItem(idx_d, RKEY(W->t, k), l) : -1;
        Py_XDECREF(l);
        if (rc < 0) return NULL;
    }
    PyObject *counts = PyList_New(W->width);
    for (Py_ssize_t i = 0; counts != NULL && i < W->width; i++) {
        PyObject *v = PyLong_FromLongLong(W->counts[i]);
        if (v == NULL) Py_CLEAR(counts);
        else PyList_SET_ITEM(counts, i, v);
    }
    PyObject *door = W->door ? PyByteArray_FromStringAndSize((const char *)W->door, W->width) : Py_NewRef(Py_None);
    PyObject *mv = W->mv_valid ? Py_BuildValue("(OL)", RKEY(W->t, W->mv_key), (long long)W->mv_est) : Py_NewRef(Py_None);
    PyObject *blocks = wt_blocks(W);
    if (counts == NULL || door == NULL || mv == NULL || blocks == NULL) {
        Py_XDECREF(counts);
        Py_XDECREF(door);
        Py_XDECREF(mv);
        Py_XDECREF(blocks);
        return NULL;
    }
    return Py_BuildValue("(nNNnNNLi)", misses, counts, door, W->main_hits, mv, blocks, (long long)W->top, W->strikes);
}

PyObject *ctxcache_replay_wtinylfu(PyObject *self, PyObject *args) {
    PyObject *reqs, *ods[4], *idx_d, *out = NULL;
    Py_ssize_t capacity;
    int doorkeeper;
    wt_t W;
    memset(&W, 0, sizeof W);
    if (!PyArg_ParseTuple(args, "On(nnn)nnnppOOOOO", &reqs, &capacity, &W.mn, &W.prob_max, &W.prot_max, &W.width,
                          &W.depth, &W.halve_at, &W.fast, &doorkeeper, &ods[0], &ods[1], &ods[2], &ods[3], &idx_d))
        return NULL;
    if (W.width < 1 || W.depth < 1 || W.width > UINT32_MAX) Py_RETURN_NONE;
    BEGIN_REPLAY(0, 1);
    W.t = &t;
    W.top = -1;
    int32_t *prev = ralloc_ids(U), *next = ralloc_ids(U), *oprev = ralloc_ids(U), *onext = ralloc_ids(U);
    W.where = ralloc(U, 1);
    W.has_idx = ralloc(U, 1);
    W.idx = ralloc(U * W.depth, sizeof(uint32_t));
    W.counts = ralloc(W.width, sizeof(int64_t));
    W.door = doorkeeper ? ralloc(W.width, 1) : NULL;
    if (!prev || !next || !oprev || !onext || !W.where || !W.has_idx || !W.idx || !W.counts || (doorkeeper && !W.door))
        goto done;
    dl_init(&W.win, prev, next);
    dl_init(&W.prob, prev, next);
    dl_init(&W.prot, prev, next);
    dl_init(&W.doomed, prev, next);
    dl_init(&W.order, oprev, onext);
    Py_ssize_t misses = 0, resident = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int32_t b = t.ids[i];
        if (W.where[b]) {
            wt_hit(&W, b);
            continue;
        }
        misses++;
        if (resident >= capacity) {
            if (!(W.fast && !W.doomed.len && wt_evict_fast(&W))) wt_evict_general(&W);
        } else {
            resident++;
        }
        wt_insert(&W, b);
    }
    out = wt_result(&W, misses, ods, idx_d);
done:
    PyMem_Free(prev);
    PyMem_Free(next);
    PyMem_Free(oprev);
    PyMem_Free(onext);
    PyMem_Free(W.where);
    PyMem_Free(W.has_idx);
    PyMem_Free(W.idx);
    PyMem_Free(W.counts);
    PyMem_Free(W.door);
    rtrace_free(&t);
    return out;
}
