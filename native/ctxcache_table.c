/* ctxcache._native.table_prefix: the router index's prefix query (src/ctxcache/router/prefix.py,
 * native_prefix) over the open-addressing table of src/ctxcache/router/table.py.
 *
 *   table_prefix(keys, lo, hi, fast, slow, shared, readers, cap, bits)
 *       -> (counts, fast_masks, slow_masks)
 *
 * keys: the request's block keys joined (16 bytes each: lo then hi word, little-endian; a lo of 0,
 * the empty mark, is read as 1, as key_arrays does). lo/hi/fast/slow: the table's uint64 arrays,
 * shared its uint8 array, readers the 8 uint64 reader masks of the shared stores, cap the capacity
 * (a key's home slot is lo % cap; linear probing, no wrap: the table is padded and its last slot
 * is always empty). bits: the live workers' bit numbers, one byte each.
 *
 * The numpy path (prefix.py, numpy_prefix) looks every key up and AND-accumulates the masks;
 * this one probes the keys in order and stops at the first block no worker can read (a miss, or a
 * dead slot): nothing after it can extend a consecutive prefix. counts: per bit in ``bits``, a
 * tuple (blocks, fast, slow) as the numpy path's ``rows`` count them. fast_masks / slow_masks: the
 * probed blocks' masks (uint64 each, at most len(keys)), for PrefixMatch.tiers.
 *
 * Probes run a few keys ahead with prefetches: at 10 M blocks every array is far bigger than the
 * caches, so each key costs a handful of cache misses, and overlapping them is the speed-up.
 * The table's arrays are pinned by their buffers for the call; the caller holds the index lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KEY_BYTES 16
#define STORES 8
#define AHEAD 8 /* keys probed ahead of the one being resolved */
#define STACK_KEYS 512

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((p), 0, 1)
#else
#define PREFETCH(p) ((void)0)
#endif

static uint64_t le64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if PY_BIG_ENDIAN
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* A key's low word as the table stores it: 0 is the empty mark, so 0 is read as 1. */
static uint64_t key_lo(const uint8_t *p) {
    uint64_t v = le64(p);
    return v ? v : 1;
}

static int get_u64(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len % 8) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s must be a uint64 array", what);
        return -1;
    }
    return 0;
}

PyObject *ctxcache_table_prefix(PyObject *self, PyObject *args) {
    Py_buffer keys, bits;
    PyObject *objs[6];
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "y*OOOOOOny*", &keys, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &cap, &bits))
        return NULL;
    Py_buffer v[6];
    int got = 0;
    PyObject *out = NULL;
    uint64_t stack_slots[3 * STACK_KEYS], *slots = stack_slots;
    static const char *names[6] = {"lo", "hi", "fast", "slow", "shared", "readers"};
    for (; got < 6; got++) {
        int r = got == 4 ? PyObject_GetBuffer(objs[got], &v[got], PyBUF_C_CONTIGUOUS) : get_u64(objs[got], &v[got], names[got]);
        if (r < 0) goto done;
    }
    Py_ssize_t n = keys.len / KEY_BYTES, len = v[0].len / 8;
    if (keys.len % KEY_BYTES) {
        PyErr_SetString(PyExc_ValueError, "block keys must be 16 bytes each");
        goto done;
    }
    if (cap <= 0 || cap >= len || v[1].len != v[0].len || v[2].len != v[0].len || v[3].len != v[0].len ||
        v[4].len != len || v[5].len != STORES * 8) {
        PyErr_SetString(PyExc_ValueError, "table arrays of mismatched sizes");
        goto done;
    }
    for (Py_ssize_t j = 0; j < bits.len; j++) {
        if (((const uint8_t *)bits.buf)[j] >= 64) {
            PyErr_SetString(PyExc_ValueError, "worker bits must be below 64");
            goto done;
        }
    }
    const uint64_t *lo = v[0].buf, *hi = v[1].buf, *fast = v[2].buf, *slow = v[3].buf, *readers = v[5].buf;
    const uint8_t *shared = v[4].buf, *kb = keys.buf;
    /* slots: each key's home, then its slot; masks: the fast then the slow mask of each block */
    if (n > STACK_KEYS && (slots = PyMem_Malloc((size_t)n * 3 * sizeof(uint64_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t *fm = slots + n, *sm = slots + 2 * n;
    /* Pass 1: each key's slot, up to the first key not in the table. */
    Py_ssize_t found = 0;
    for (Py_ssize_t i = 0; i < n && i < AHEAD; i++) {
        slots[i] = key_lo(kb + i * KEY_BYTES) % (uint64_t)cap;
        PREFETCH(lo + slots[i]);
    }
    for (; found < n; found++) {
        if (found + AHEAD < n) {
            uint64_t h = slots[found + AHEAD] = key_lo(kb + (found + AHEAD) * KEY_BYTES) % (uint64_t)cap;
            PREFETCH(lo + h);
            PREFETCH(hi + h);
        }
        uint64_t klo = key_lo(kb + found * KEY_BYTES), khi = le64(kb + found * KEY_BYTES + 8);
        Py_ssize_t p = (Py_ssize_t)slots[found];
        while (p < len && lo[p] != 0 && !(lo[p] == klo && hi[p] == khi)) p++;
        if (p >= len || lo[p] == 0) break;
        slots[found] = (uint64_t)p;
    }
    /* Pass 2: the run of blocks some worker can read, their masks and per-worker counts. */
    uint32_t blocks[64] = {0}, nfast[64] = {0}, nslow[64] = {0};
    uint64_t run = ~(uint64_t)0;
    Py_ssize_t probed = 0;
    for (Py_ssize_t i = 0; i < found && i < AHEAD; i++) {
        PREFETCH(fast + slots[i]);
        PREFETCH(slow + slots[i]);
        PREFETCH(shared + slots[i]);
    }
    for (; probed < found; probed++) {
        if (probed + AHEAD < found) {
            uint64_t s = slots[probed + AHEAD];
            PREFETCH(fast + s);
            PREFETCH(slow + s);
            PREFETCH(shared + s);
        }
        uint64_t s = slots[probed], f = fast[s], sl = slow[s], sh = 0;
        uint8_t on = shared[s];
        for (int b = 0; on && b < STORES; b++)
            if (on & (1u << b)) sh |= readers[b];
        run &= f | sl | sh;
        if (run == 0) break;
        fm[probed] = f;
        sm[probed] = sl;
        uint64_t rf = run & f, rs = run & sl & ~f;
        for (uint64_t m = run; m; m &= m - 1) blocks[__builtin_ctzll(m)]++;
        for (uint64_t m = rf; m; m &= m - 1) nfast[__builtin_ctzll(m)]++;
        for (uint64_t m = rs; m; m &= m - 1) nslow[__builtin_ctzll(m)]++;
    }
    PyObject *fb = PyBytes_FromStringAndSize((const char *)fm, probed * 8);
    PyObject *sb = fb ? PyBytes_FromStringAndSize((const char *)sm, probed * 8) : NULL;
    if (sb == NULL) {
        Py_XDECREF(fb);
        goto done;
    }
    PyObject *counts = PyList_New(bits.len);
    if (counts == NULL) {
        Py_DECREF(fb);
        Py_DECREF(sb);
        goto done;
    }
    for (Py_ssize_t j = 0; j < bits.len; j++) {
        int b = ((const uint8_t *)bits.buf)[j];
        PyObject *t = Py_BuildValue("(III)", blocks[b], nfast[b], nslow[b]);
        if (t == NULL) {
            Py_DECREF(counts);
            Py_DECREF(fb);
            Py_DECREF(sb);
            goto done;
        }
        PyList_SET_ITEM(counts, j, t);
    }
    out = Py_BuildValue("(NNN)", counts, fb, sb);
done:
    if (slots != stack_slots) PyMem_Free(slots);
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    PyBuffer_Release(&keys);
    PyBuffer_Release(&bits);
    return out;
}

/* table_upsert(lo_keys, hi_keys, lo, hi, cap, limit, max_used, used, out) -> (done, used, why)
 *
 * KeyTable.insert's work in one serial pass (router/table.py keeps the numpy version, the
 * reference): each key (lo_keys[i], hi_keys[i], uint64 arrays; a lo of 0 already mapped to 1)
 * is found in its run, or claims the run's first free slot; out[i] (int64) is its slot. A
 * duplicate key in the batch finds the slot its first copy claimed. Stops before a key that would
 * push ``used`` past ``max_used`` (why 1: rehash and insert again) or whose run would claim past
 * slot ``limit`` (why 2: grow); why 0 when every key is placed. One probe per key and no sort:
 * the numpy path's rounds of np.unique cost seconds for a million keys. The caller holds the
 * index lock, and rehashes by calling this on an empty table with the live keys. */
PyObject *ctxcache_table_upsert(PyObject *self, PyObject *args) {
    PyObject *objs[5];
    Py_ssize_t cap, limit, max_used, used;
    if (!PyArg_ParseTuple(args, "OOOOnnnnO", &objs[0], &objs[1], &objs[2], &objs[3], &cap, &limit, &max_used, &used,
                          &objs[4]))
        return NULL;
    Py_buffer v[5];
    int got = 0;
    PyObject *out = NULL;
    static const char *names[5] = {"lo_keys", "hi_keys", "lo", "hi", "out"};
    for (; got < 5; got++) {
        int flags = got >= 2 ? PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE : PyBUF_C_CONTIGUOUS;
        if (PyObject_GetBuffer(objs[got], &v[got], flags) < 0) goto done;
        if (v[got].len % 8) {
            PyErr_Format(PyExc_ValueError, "%s must be a 64-bit array", names[got]);
            got++;
            goto done;
        }
    }
    Py_ssize_t n = v[0].len / 8, len = v[2].len / 8;
    if (v[1].len != v[0].len || v[4].len != v[0].len || v[3].len != v[2].len || cap <= 0 || cap >= len ||
        limit >= len || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "table arrays of mismatched sizes");
        goto done;
    }
    const uint64_t *klo = v[0].buf, *khi = v[1].buf;
    uint64_t *lo = v[2].buf, *hi = v[3].buf;
    int64_t *slots = v[4].buf;
    Py_ssize_t i = 0;
    int why = 0;
    for (Py_ssize_t j = 0; j < n && j < AHEAD; j++) PREFETCH(lo + klo[j] % (uint64_t)cap);
    for (; i < n; i++) {
        if (i + AHEAD < n) PREFETCH(lo + klo[i + AHEAD] % (uint64_t)cap);
        uint64_t a = klo[i] ? klo[i] : 1, b = khi[i];
        Py_ssize_t p = (Py_ssize_t)(a % (uint64_t)cap);
        while (p <= limit && lo[p] != 0 && !(lo[p] == a && hi[p] == b)) p++;
        if (p <= limit && lo[p] != 0) {
            slots[i] = p;
            continue;
        }
        if (p > limit) {
            why = 2;
            break;
        }
        if (used >= max_used) {
            why = 1;
            break;
        }
        lo[p] = a;
        hi[p] = b;
        slots[i] = p;
        used++;
    }
    out = Py_BuildValue("(nni)", i, used, why);
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&v[k]);
    return out;
}
