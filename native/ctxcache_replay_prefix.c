/* The compiled replay loop of prefix-aware in object semantics (policies/prefix_aware.py holds
 * the reference methods): no radix index, so every access is its own request (_touch, then _flush
 * at depth 0) and every key may go. Per key its meta (class, last access, count, seq) or its ghost
 * (class, last access, count, evicted at); per class a heap of (last access, seq, key), the learned
 * curve (hist, unused -> hd), and the cached head (_hv). The float steps are the reference's, in its
 * order (sums left to right, as Python 3.11's sum() adds floats; 3.12 compensates, so there this
 * declines and Python runs its own loop), with libm's pow and log2 as Python's float ** and
 * math.log2 call them. */
#include "ctxcache_replay.h"

#include <math.h>
#include <string.h>

#define NB 30 /* _NBINS */

RHEAP_DEFINE(php, double) /* (last access, seq, key) */

typedef struct {
    /* parameters */
    Py_ssize_t max_count, update_every, ncls, n_edges;
    double hl, shared_count, cost_weight, horizon, margin, ghost_factor, prior, decay, warmup;
    double edges[64], mid[NB];
    /* the curve */
    double *hist, *unused, *hd;
    int64_t events;
    int learned, failed; /* failed: a step Python would raise on (float ** overflow) */
    /* keys: meta (resident) and ghosts */
    dlist meta, ghost;
    uint8_t *in_meta, *in_ghost;
    int32_t *m_cls, *g_cls;
    double *m_last, *m_count, *g_last, *g_count, *g_gone;
    int64_t *m_seq, seq;
    /* the insert rate behind tau */
    double tau, ins_t0, ins_last;
    int64_t ins_n;
    /* heaps and cached heads */
    php_t *heaps;
    uint8_t *hv_ok, *dirty;
    double *hv_val, *hv_last, hv_time;
    int64_t *hv_seq;
    int32_t *hv_key;
} pa_t;

static inline int pa_bin(double age) {
    if (age < 1.0) return 0;
    double b = 2.0 * log2(age);
    return b >= NB - 2 ? NB - 1 : (int)b + 1;
}

static double pa_sum(const double *x, Py_ssize_t n, Py_ssize_t stride) {
    double s = 0.0;
    for (Py_ssize_t i = 0; i < n; i++) s += x[i * stride];
    return s;
}

static void pa_refit(pa_t *P) {
    double horizon = P->horizon * (1.0 > P->tau ? 1.0 : P->tau), pooled[NB], r[NB];
    for (int b = 0; b < NB; b++) pooled[b] = pa_sum(P->hist + b, P->ncls, NB);
    double pooled_unused = pa_sum(P->unused, P->ncls, 1);
    double total = pa_sum(pooled, NB, 1) + pooled_unused;
    double w = total > 0 ? P->prior / total : 0.0;
    for (Py_ssize_t c = 0; c < P->ncls; c++) {
        double *hist = P->hist + c * NB, *hd = P->hd + c * NB;
        for (int b = 0; b < NB; b++) r[b] = hist[b] + w * pooled[b];
        double alive = P->unused[c] + w * pooled_unused + pa_sum(r, NB, 1);
        for (int i = 0; i < NB; i++) {
            double a = P->mid[i], hits = 0.0, spent = 0.0;
            for (int b = i; b < NB; b++) {
                double dt = b > i ? P->mid[b] - a : 0.25 * a + 0.25;
                if (dt > horizon) break;
                hits += r[b];
                spent += r[b] * dt;
            }
            spent += (alive - hits) * horizon;
            hd[i] = spent > 0 ? hits / spent : 0.0;
            alive -= r[i];
        }
    }
    P->learned = (double)P->events >= P->warmup;
    P->hv_time = -INFINITY;
    for (Py_ssize_t j = 0; j < P->ncls * NB; j++) P->hist[j] = P->hist[j] * P->decay;
    for (Py_ssize_t c = 0; c < P->ncls; c++) P->unused[c] = P->unused[c] * P->decay;
}

static void pa_ended(pa_t *P, int32_t cls, double age, int reused) {
    if (reused)
        P->hist[cls * NB + pa_bin(age)] += 1.0;
    else
        P->unused[cls] += 1.0;
    if (++P->events % P->update_every == 0) pa_refit(P);
}

static double pa_count(pa_t *P, double count, double last, double now) {
    if (!P->hl) return count + 1.0;
    double x = (now - last) / P->hl, f = x == 0.0 ? 1.0 : pow(0.5, x);
    if (isinf(f)) P->failed = 1; /* Python: OverflowError */
    return count * f + 1.0;
}

static void pa_count_insert(pa_t *P, double now) {
    if (now > P->ins_last && P->ins_n >= 1024) {
        double tau = (double)P->meta.len * (now - P->ins_t0) / (double)P->ins_n;
        P->tau = P->tau <= 0 ? tau : 0.7 * P->tau + 0.3 * tau;
        P->ins_n = 0;
        P->ins_t0 = now;
    } else if (isnan(P->ins_t0)) {
        P->ins_t0 = now;
    }
    P->ins_n++;
    P->ins_last = now;
}

static int pa_push(pa_t *P, int32_t k) {
    int32_t c = P->m_cls[k];
    P->m_seq[k] = P->seq++;
    P->dirty[c] = 1;
    return php_push(&P->heaps[c], (php_e){P->m_last[k], P->m_seq[k], k});
}

/* _flush for the one key just touched, then the ghosts' expiry. */
static int pa_flush(pa_t *P, int32_t k, int inserted, double prev, double now) {
    Py_ssize_t ctx = 0;
    for (Py_ssize_t j = 0; j < P->n_edges; j++) ctx += (inserted ? 1.0 : 0.0) >= P->edges[j];
    if (P->shared_count > 0) {
        double deepest = inserted ? 0.0 : prev;
        ctx = 2 * ctx + (0 < deepest && deepest < P->shared_count);
    }
    int64_t n = (int64_t)P->m_count[k];
    P->m_cls[k] = (int32_t)(ctx * P->max_count + (n < P->max_count ? n : P->max_count) - 1);
    if (pa_push(P, k) < 0) return -1;
    double limit = P->ghost_factor * (double)(P->meta.len > 1 ? P->meta.len : 1);
    double horizon = P->tau > 0 ? P->ghost_factor * P->tau : INFINITY;
    while (P->ghost.len) { /* expire ghosts: those lifetimes ended unreused */
        int32_t g = P->ghost.head;
        if ((double)P->ghost.len <= limit && now - P->g_gone[g] <= horizon) break;
        dl_unlink(&P->ghost, g);
        P->in_ghost[g] = 0;
        pa_ended(P, P->g_cls[g], P->g_gone[g] - P->g_last[g], 0);
    }
    return 0;
}

static int pa_touch(pa_t *P, int32_t k, int inserted, double now) {
    double prev;
    if (!P->in_meta[k]) {
        double count = 1.0;
        prev = 1.0;
        if (P->in_ghost[k]) { /* a reuse the cache missed */
            dl_unlink(&P->ghost, k);
            P->in_ghost[k] = 0;
            pa_ended(P, P->g_cls[k], now - P->g_last[k], 1);
            prev = P->g_count[k];
            count = pa_count(P, prev, P->g_last[k], now);
        }
        P->in_meta[k] = 1;
        dl_push(&P->meta, k);
        P->m_cls[k] = 0;
        P->m_last[k] = now;
        P->m_count[k] = count;
        P->m_seq[k] = -1;
        pa_count_insert(P, now);
    } else {
        pa_ended(P, P->m_cls[k], now - P->m_last[k], 1);
        prev = P->m_count[k];
        P->m_count[k] = pa_count(P, prev, P->m_last[k], now);
        P->m_last[k] = now;
        P->m_seq[k] = -1;
    }
    return pa_flush(P, k, inserted, prev, now);
}

/* _head(c, now, None): the class's oldest live entry, valued, into the cache. */
static void pa_head(pa_t *P, Py_ssize_t c, double now) {
    php_t *h = &P->heaps[c];
    P->hv_ok[c] = 0;
    while (h->n) {
        php_e e = h->a[0];
        if (!P->in_meta[e.key] || P->m_seq[e.key] != e.seq) {
            php_pop(h);
            continue;
        }
        P->hv_ok[c] = 1;
        P->hv_val[c] = P->learned ? P->hd[c * NB + pa_bin(now - e.s)] * (1.0 + P->cost_weight * 0.0) : 0.0;
        P->hv_last[c] = e.s;
        P->hv_seq[c] = e.seq;
        P->hv_key[c] = e.key;
        return;
    }
}

/* _choose: the lowest (value, last, seq) head if below margin x the oldest's value, else the oldest. */
static Py_ssize_t pa_choose(const pa_t *P) {
    Py_ssize_t low = -1, old = -1;
    for (Py_ssize_t c = 0; c < P->ncls; c++) {
        if (!P->hv_ok[c]) continue;
        double v = P->hv_val[c], l = P->hv_last[c];
        int64_t q = P->hv_seq[c];
        if (old < 0 || l < P->hv_last[old] || (l == P->hv_last[old] && q < P->hv_seq[old])) old = c;
        if (low < 0 || v < P->hv_val[low] ||
            (v == P->hv_val[low] && (l < P->hv_last[low] || (l == P->hv_last[low] && q < P->hv_seq[low]))))
            low = c;
    }
    if (low < 0) return -1;
    return P->hv_val[low] < P->margin * P->hv_val[old] ? low : old;
}

static int pa_evict(pa_t *P, double now) {
    if (now != P->hv_time) { /* values depend on age: every head again */
        P->hv_time = now;
        memset(P->dirty, 1, (size_t)P->ncls);
    }
    int requeued = 0;
    Py_ssize_t c;
    int32_t key;
    for (;;) {
        for (Py_ssize_t j = 0; j < P->ncls; j++)
            if (P->dirty[j]) pa_head(P, j, now);
        memset(P->dirty, 0, (size_t)P->ncls);
        c = pa_choose(P);
        if (c < 0) {
            if (requeued || !P->meta.len) return 0;
            for (int32_t k = P->meta.head; k >= 0; k = P->meta.next[k])
                if (pa_push(P, k) < 0) return -1;
            requeued = 1;
            continue;
        }
        key = P->hv_key[c];
        if (P->in_meta[key] && P->m_seq[key] == P->hv_seq[c]) break;
        P->dirty[c] = 1; /* the cached head went stale since */
    }
    dl_unlink(&P->meta, key);
    P->in_meta[key] = 0;
    php_pop(&P->heaps[c]);
    P->dirty[c] = 1;
    P->in_ghost[key] = 1;
    dl_push(&P->ghost, key);
    P->g_cls[key] = P->m_cls[key];
    P->g_last[key] = P->m_last[key];
    P->g_count[key] = P->m_count[key];
    P->g_gone[key] = now;
    return 0;
}

static PyObject *floats(const double *x, Py_ssize_t n) {
    PyObject *l = PyList_New(n);
    for (Py_ssize_t i = 0; l != NULL && i < n; i++) {
        PyObject *v = PyFloat_FromDouble(x[i]);
        if (v == NULL) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, v);
    }
    return l;
}

/* [[floats of class 0], ...]: _hist and _hd. */
static PyObject *per_class(const pa_t *P, const double *x) {
    PyObject *l = PyList_New(P->ncls);
    for (Py_ssize_t c = 0; l != NULL && c < P->ncls; c++) {
        PyObject *v = floats(x + c * NB, NB);
        if (v == NULL) Py_CLEAR(l);
        else PyList_SET_ITEM(l, c, v);
    }
    return l;
}

/* _heaps: per class the list of (last, seq, key) in heap order; and _hv: per class its cached
 * (value, last, seq, key, class) or None. */
static PyObject *heaps_and_heads(const pa_t *P, const rtrace *t, PyObject **hv) {
    PyObject *heaps = PyList_New(P->ncls);
    *hv = PyList_New(P->ncls);
    for (Py_ssize_t c = 0; heaps != NULL && *hv != NULL && c < P->ncls; c++) {
        const php_t *h = &P->heaps[c];
        PyObject *l = PyList_New(h->n), *head;
        for (Py_ssize_t j = 0; l != NULL && j < h->n; j++) {
            PyObject *e = Py_BuildValue("(dLO)", h->a[j].s, (long long)h->a[j].seq, RKEY(t, h->a[j].key));
            if (e == NULL) Py_CLEAR(l);
            else PyList_SET_ITEM(l, j, e);
        }
        if (P->hv_ok[c])
            head = Py_BuildValue("(ddLOn)", P->hv_val[c], P->hv_last[c], (long long)P->hv_seq[c], RKEY(t, P->hv_key[c]), c);
        else
            head = Py_NewRef(Py_None);
        if (l == NULL || head == NULL) {
            Py_XDECREF(l);
            Py_XDECREF(head);
            Py_CLEAR(heaps);
            break;
        }
        PyList_SET_ITEM(heaps, c, l);
        PyList_SET_ITEM(*hv, c, head);
    }
    if (heaps == NULL) Py_CLEAR(*hv);
    return heaps;
}

/* Fill _meta and _ghost; *out = the rest of the state, as PrefixAware.replay_object unpacks it. */
static int prefix_result(const pa_t *P, const rtrace *t, PyObject *meta_d, PyObject *ghost_od, PyObject **out) {
    for (int32_t k = P->meta.head; k >= 0; k = P->meta.next[k]) {
        PyObject *m = Py_BuildValue("[iddiL]", P->m_cls[k], P->m_last[k], P->m_count[k], 0, (long long)P->m_seq[k]);
        int rc = m ? PyObject_SetItem(meta_d, RKEY(t, k), m) : -1;
        Py_XDECREF(m);
        if (rc < 0) return -1;
    }
    for (int32_t k = P->ghost.head; k >= 0; k = P->ghost.next[k]) {
        PyObject *g = Py_BuildValue("(iddd)", P->g_cls[k], P->g_last[k], P->g_count[k], P->g_gone[k]);
        int rc = g ? PyObject_SetItem(ghost_od, RKEY(t, k), g) : -1;
        Py_XDECREF(g);
        if (rc < 0) return -1;
    }
    PyObject *dirty = PyList_New(0), *hv = NULL, *heaps = heaps_and_heads(P, t, &hv);
    for (Py_ssize_t c = 0; dirty != NULL && c < P->ncls; c++) {
        PyObject *v = P->dirty[c] ? PyLong_FromSsize_t(c) : NULL;
        if (P->dirty[c] && (v == NULL || PyList_Append(dirty, v) < 0)) Py_CLEAR(dirty);
        Py_XDECREF(v);
    }
    PyObject *hist = per_class(P, P->hist), *hd = per_class(P, P->hd), *unused = floats(P->unused, P->ncls);
    if (dirty == NULL || heaps == NULL || hist == NULL || hd == NULL || unused == NULL) {
        Py_XDECREF(dirty);
        Py_XDECREF(hv);
        Py_XDECREF(heaps);
        Py_XDECREF(hist);
        Py_XDECREF(hd);
        Py_XDECREF(unused);
        return -1;
    }
    *out = Py_BuildValue("(NNNLOdLddNLNNd)", hist, unused, hd, (long long)P->events, P->learned ? Py_True : Py_False,
                         P->tau, (long long)P->ins_n, P->ins_t0, P->ins_last, heaps, (long long)P->seq, hv, dirty,
                         P->hv_time);
    return *out == NULL ? -1 : 0;
}

PyObject *ctxcache_replay_prefix_aware(PyObject *self, PyObject *args) {
    PyObject *reqs, *edges, *mid, *meta_d, *ghost_od, *out = NULL;
    Py_ssize_t capacity;
    long long seq0;
    pa_t P;
    memset(&P, 0, sizeof P);
    if (!PyArg_ParseTuple(args, "On(ndO!ddddddndd)nO!LOO", &reqs, &capacity, &P.max_count, &P.hl, &PyTuple_Type, &edges,
                          &P.shared_count, &P.cost_weight, &P.horizon, &P.margin, &P.ghost_factor, &P.prior,
                          &P.update_every, &P.decay, &P.warmup, &P.ncls, &PyList_Type, &mid, &seq0, &meta_d, &ghost_od))
        return NULL;
#if PY_VERSION_HEX >= 0x030C0000
    Py_RETURN_NONE; /* sum() of floats is compensated from 3.12 on: the curve would differ */
#endif
    P.n_edges = PyTuple_GET_SIZE(edges);
    if (P.n_edges > 64 || PyList_GET_SIZE(mid) != NB || P.update_every < 1 || P.ncls < 1) Py_RETURN_NONE;
    for (Py_ssize_t j = 0; j < P.n_edges; j++) P.edges[j] = PyFloat_AsDouble(PyTuple_GET_ITEM(edges, j));
    for (int j = 0; j < NB; j++) P.mid[j] = PyFloat_AsDouble(PyList_GET_ITEM(mid, j));
    if (PyErr_Occurred()) return NULL;
    BEGIN_REPLAY(1, 0);
    Py_ssize_t C = P.ncls;
    int32_t *links[4] = {ralloc_ids(U), ralloc_ids(U), ralloc_ids(U), ralloc_ids(U)};
    P.in_meta = ralloc(U, 2);
    P.m_cls = ralloc(U, 2 * sizeof(int32_t));
    P.m_last = ralloc(U, 5 * sizeof(double));
    P.m_seq = ralloc(U, sizeof(int64_t));
    P.hist = ralloc(C * (2 * NB + 3), sizeof(double)); /* hist, hd, unused, hv_val, hv_last */
    P.heaps = ralloc(C, sizeof(php_t));
    P.hv_ok = ralloc(C, 2);
    P.hv_seq = ralloc(C, sizeof(int64_t));
    P.hv_key = ralloc(C, sizeof(int32_t));
    if (!links[0] || !links[1] || !links[2] || !links[3] || !P.in_meta || !P.m_cls || !P.m_last || !P.m_seq ||
        !P.hist || !P.heaps || !P.hv_ok || !P.hv_seq || !P.hv_key)
        goto done;
    P.in_ghost = P.in_meta + U;
    P.g_cls = P.m_cls + U;
    P.m_count = P.m_last + U;
    P.g_last = P.m_last + 2 * U;
    P.g_count = P.m_last + 3 * U;
    P.g_gone = P.m_last + 4 * U;
    P.hd = P.hist + C * NB;
    P.unused = P.hist + 2 * C * NB;
    P.hv_val = P.unused + C;
    P.hv_last = P.hv_val + C;
    P.dirty = P.hv_ok + C;
    for (Py_ssize_t j = 0; j < C * NB; j++) P.hd[j] = 1.0;
    dl_init(&P.meta, links[0], links[1]);
    dl_init(&P.ghost, links[2], links[3]);
    P.seq = seq0;
    P.ins_t0 = NAN;
    P.ins_last = P.hv_time = -INFINITY;
    Py_ssize_t misses = 0, resident = 0;
    for (Py_ssize_t r = 0; r < t.nreq && !P.failed; r++) {
        double now = t.time[r];
        for (Py_ssize_t i = t.start[r]; i < t.start[r + 1]; i++) {
            int32_t b = t.ids[i];
            int inserted = !P.in_meta[b];
            if (inserted) {
                misses++;
                if (resident < capacity)
                    resident++;
                else if (pa_evict(&P, now) < 0)
                    goto done;
            }
            if (pa_touch(&P, b, inserted, now) < 0) goto done;
        }
    }
    if (P.failed) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *state = NULL;
    if (prefix_result(&P, &t, meta_d, ghost_od, &state) == 0) out = Py_BuildValue("(nN)", misses, state);
done:
    for (int j = 0; j < 4; j++) PyMem_Free(links[j]);
    for (Py_ssize_t c = 0; P.heaps != NULL && c < C; c++) PyMem_Free(P.heaps[c].a);
    PyMem_Free(P.in_meta);
    PyMem_Free(P.m_cls);
    PyMem_Free(P.m_last);
    PyMem_Free(P.m_seq);
    PyMem_Free(P.hist);
    PyMem_Free(P.heaps);
    PyMem_Free(P.hv_ok);
    PyMem_Free(P.hv_seq);
    PyMem_Free(P.hv_key);
    rtrace_free(&t);
    return out;
}
