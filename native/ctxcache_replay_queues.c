/* Compiled replay loops of the queue policies: 2Q, ARC, LFU, S3-FIFO and LIRS (policies/twoq.py,
 * arc.py, lfu.py, s3fifo.py, lirs.py hold the reference methods and their Python fused loops).
 * Each runs Policy.replay_object's loop (a membership test, then on_hit, or evict(None) once
 * `capacity` keys went in and on_insert) over a fresh instance and fills its empty containers with
 * the state that loop leaves; an OrderedDict is a dlist, a dict's insertion order a dlist too. */
#include "ctxcache_replay.h"

/* ---- 2Q: A1in (FIFO), Am (LRU), A1out (ghost ids); one key is in at most one of them ---- */
enum { Q_NONE, Q_AIN, Q_AM, Q_AOUT };

PyObject *ctxcache_replay_2q(PyObject *self, PyObject *args) {
    PyObject *reqs, *ain_od, *aout_od, *am_od, *out = NULL;
    Py_ssize_t capacity, kin, kout;
    if (!PyArg_ParseTuple(args, "OnnnOOO", &reqs, &capacity, &kin, &kout, &ain_od, &aout_od, &am_od)) return NULL;
    BEGIN_REPLAY(0, 0);
    int32_t *prev = ralloc_ids(U), *next = ralloc_ids(U);
    uint8_t *where = ralloc(U, 1);
    if (prev == NULL || next == NULL || where == NULL) goto done;
    dlist ain, am, aout;
    dl_init(&ain, prev, next);
    dl_init(&am, prev, next);
    dl_init(&aout, prev, next);
    Py_ssize_t misses = 0, resident = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int32_t b = t.ids[i];
        if (where[b] == Q_AM) {
            dl_to_back(&am, b);
            continue;
        }
        if (where[b] == Q_AIN) continue; /* A1in ignores hits */
        misses++;
        if (resident >= capacity) {
            if (ain.len > kin || !am.len) { /* A1in's oldest, its id to A1out */
                if (ain.len) {
                    int32_t k = dl_pop(&ain);
                    where[k] = Q_NONE;
                    if (kout > 0) {
                        dl_push(&aout, k);
                        where[k] = Q_AOUT;
                        while (aout.len > kout + 1) where[dl_pop(&aout)] = Q_NONE;
                    }
                }
            } else {
                where[dl_pop(&am)] = Q_NONE;
            }
        } else {
            resident++;
        }
        if (where[b] == Q_AOUT) {
            dl_unlink(&aout, b);
            dl_push(&am, b);
            where[b] = Q_AM;
        } else {
            dl_push(&ain, b);
            where[b] = Q_AIN;
        }
        while (aout.len > kout) where[dl_pop(&aout)] = Q_NONE;
    }
    if (dl_fill(ain_od, &ain, &t) < 0 || dl_fill(aout_od, &aout, &t) < 0 || dl_fill(am_od, &am, &t) < 0) goto done;
    out = PyLong_FromSsize_t(misses);
done:
    PyMem_Free(prev);
    PyMem_Free(next);
    PyMem_Free(where);
    rtrace_free(&t);
    return out;
}

/* ---- ARC: T1, T2 resident, B1, B2 ghosts; p adapts at the miss, before the replacement ---- */
enum { A_NONE, A_T1, A_T2, A_B1, A_B2 };

PyObject *ctxcache_replay_arc(PyObject *self, PyObject *args) {
    PyObject *reqs, *t1_od, *t2_od, *b1_od, *b2_od, *out = NULL;
    Py_ssize_t capacity, c;
    double p;
    if (!PyArg_ParseTuple(args, "OnndOOOO", &reqs, &capacity, &c, &p, &t1_od, &t2_od, &b1_od, &b2_od)) return NULL;
    BEGIN_REPLAY(0, 0);
    int32_t *prev = ralloc_ids(U), *next = ralloc_ids(U);
    uint8_t *where = ralloc(U, 1);
    if (prev == NULL || next == NULL || where == NULL) goto done;
    dlist t1, t2, b1, b2;
    dl_init(&t1, prev, next);
    dl_init(&t2, prev, next);
    dl_init(&b1, prev, next);
    dl_init(&b2, prev, next);
    const double fc = (double)c;
    Py_ssize_t misses = 0, resident = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int32_t b = t.ids[i];
        uint8_t w = where[b];
        if (w == A_T1) {
            dl_unlink(&t1, b);
            dl_push(&t2, b);
            where[b] = A_T2;
            continue;
        }
        if (w == A_T2) {
            dl_to_back(&t2, b);
            continue;
        }
        misses++;
        int in_b2 = 0;
        if (w == A_B1) { /* Python's min/max: the first argument unless the second is strictly past it */
            double d = (double)b2.len / (double)b1.len, step = 1.0 > d ? 1.0 : d, q = p + step;
            p = fc < q ? fc : q;
        } else if (w == A_B2) {
            double d = (double)b1.len / (double)b2.len, step = 1.0 > d ? 1.0 : d, q = p - step;
            p = 0.0 > q ? 0.0 : q;
            in_b2 = 1;
        }
        if (resident >= capacity) {
            double n1 = (double)t1.len;
            if (t1.len && (n1 > p || (n1 == p && in_b2) || !t2.len)) {
                int32_t k = dl_pop(&t1);
                dl_push(&b1, k);
                where[k] = A_B1;
            } else if (t2.len) {
                int32_t k = dl_pop(&t2);
                dl_push(&b2, k);
                where[k] = A_B2;
            }
        } else {
            resident++;
        }
        if (w == A_B1 || w == A_B2) { /* the replacement never touches the missed key's ghost */
            dl_unlink(w == A_B1 ? &b1 : &b2, b);
            dl_push(&t2, b);
            where[b] = A_T2;
        } else {
            dl_push(&t1, b);
            where[b] = A_T1;
            Py_ssize_t n1 = t1.len + b1.len;
            if (n1 > c) {
                if (b1.len) where[dl_pop(&b1)] = A_NONE;
            } else if (n1 + t2.len + b2.len > 2 * c && b2.len) {
                where[dl_pop(&b2)] = A_NONE;
            }
        }
    }
    if (dl_fill(t1_od, &t1, &t) < 0 || dl_fill(t2_od, &t2, &t) < 0 || dl_fill(b1_od, &b1, &t) < 0 ||
        dl_fill(b2_od, &b2, &t) < 0)
        goto done;
    out = Py_BuildValue("(nd)", misses, p);
done:
    PyMem_Free(prev);
    PyMem_Free(next);
    PyMem_Free(where);
    rtrace_free(&t);
    return out;
}

/* ---- LFU: one list per use count (the buckets, a dict in order of creation) ---- */

/* ``count`` in key order, then each bucket (a new bucket_type()) in order of creation. */
static int lfu_fill(PyObject *count_d, PyObject *buckets_d, PyObject *bucket_type, const dlist *order,
                    const int32_t *cnt, const dlist *corder, const dlist *bk, const rtrace *t) {
    for (int32_t k = order->head; k >= 0; k = order->next[k]) {
        PyObject *v = PyLong_FromLong(cnt[k]);
        int rc = v ? PyObject_SetItem(count_d, RKEY(t, k), v) : -1;
        Py_XDECREF(v);
        if (rc < 0) return -1;
    }
    for (int32_t n = corder->head; n >= 0; n = corder->next[n]) {
        PyObject *v = PyLong_FromLong(n), *od = PyObject_CallNoArgs(bucket_type);
        int rc = v && od ? PyObject_SetItem(buckets_d, v, od) : -1;
        if (rc == 0) rc = dl_fill(od, &bk[n], t);
        Py_XDECREF(v);
        Py_XDECREF(od);
        if (rc < 0) return -1;
    }
    return 0;
}

PyObject *ctxcache_replay_lfu(PyObject *self, PyObject *args) {
    PyObject *reqs, *count_d, *buckets_d, *bucket_type, *out = NULL;
    Py_ssize_t capacity;
    if (!PyArg_ParseTuple(args, "OnOOO", &reqs, &capacity, &count_d, &buckets_d, &bucket_type)) return NULL;
    BEGIN_REPLAY(0, 0);
    Py_ssize_t top = t.n + 2; /* counts stay below it */
    int32_t *cnt = ralloc(U, sizeof(int32_t)), *oprev = ralloc_ids(U), *onext = ralloc_ids(U);
    int32_t *bprev = ralloc_ids(U), *bnext = ralloc_ids(U), *cprev = ralloc_ids(top), *cnext = ralloc_ids(top);
    dlist *bk = ralloc(top, sizeof(dlist));
    if (!cnt || !oprev || !onext || !bprev || !bnext || !cprev || !cnext || !bk) goto done;
    dlist order, corder;
    dl_init(&order, oprev, onext);
    dl_init(&corder, cprev, cnext);
    for (Py_ssize_t n = 0; n < top; n++) dl_init(&bk[n], bprev, bnext);
    Py_ssize_t misses = 0, resident = 0, low = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int32_t b = t.ids[i], n = cnt[b];
        if (n) { /* on_hit: to the back of the next count's bucket */
            dl_unlink(&bk[n], b);
            if (!bk[n].len) {
                dl_unlink(&corder, n);
                if (low == n) low = n + 1;
            }
            cnt[b] = ++n;
            if (!bk[n].len) dl_push(&corder, n);
            dl_push(&bk[n], b);
            continue;
        }
        misses++;
        if (resident >= capacity) {
            if (order.len) { /* the first key of the lowest count */
                int32_t k = dl_pop(&bk[low]);
                cnt[k] = 0;
                dl_unlink(&order, k);
                if (!bk[low].len) dl_unlink(&corder, (int32_t)low);
            }
        } else {
            resident++;
        }
        cnt[b] = 1;
        dl_push(&order, b);
        if (!bk[1].len) dl_push(&corder, 1);
        dl_push(&bk[1], b);
        low = 1;
    }
    if (lfu_fill(count_d, buckets_d, bucket_type, &order, cnt, &corder, bk, &t) < 0) goto done;
    out = Py_BuildValue("(nn)", misses, low);
done:
    PyMem_Free(cnt);
    PyMem_Free(oprev);
    PyMem_Free(onext);
    PyMem_Free(bprev);
    PyMem_Free(bnext);
    PyMem_Free(cprev);
    PyMem_Free(cnext);
    PyMem_Free(bk);
    rtrace_free(&t);
    return out;
}
