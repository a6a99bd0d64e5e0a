/* ctxcache._native: the compiled key walk (docs/ARCHITECTURE.md, "The native module").
 *
 * Four functions, each the exact counterpart of pure-Python code in src/ctxcache/keys.py, which
 * stays the reference and the fallback (tests/test_native.py checks one against the other):
 *
 *   token_bytes(tokens)  -> bytes | None   as_token_array(tokens).tobytes(), or None where the
 *                                           Python path must decide (and name the error)
 *   chain(buf, stride, start, stop, parent, secret, kind) -> list[bytes]   BlockHasher._stream
 *   walk(buf, stride, n, keys, root, secret, kind, shards, get) -> list    BlockHasher.walk
 *   shard_get_many(shards, keys, p) -> list                    MemoryTier.get_many's list comprehension
 *
 * key(block i) = H(key(block i-1) || int32 token bytes of block i):
 *   kind 0: XXH3-128 seeded with secret[16:24] (little-endian), canonical (big-endian) digest,
 *           as xxhash.xxh3_128_digest returns it;
 *   kind 1: BLAKE3 keyed with the 32-byte secret, the first 16 bytes of its output.
 * Both from the vendored C sources of the libraries the Python packages wrap (native/vendor/).
 *
 * The module also holds table_prefix (ctxcache_table.c): the router index's prefix query, whose
 * reference is the numpy path in src/ctxcache/router/index.py; and stored_run (ctxcache_events.c):
 * the KV events' per-block loop, whose reference is EngineWatch.stored_run_py (events/watch.py); and
 * encode_events (ctxcache_encode.c): their stream encoder for the hot kinds, codec.py's the reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include "xxhash.h"
#include "blake3.h"

#define KEY_BYTES 16
#define SECRET_BYTES 32
#define INT32_MAX_ID 2147483647LL
/* Hash without the GIL when a call hashes at least this many bytes (a 32k-token prompt). */
#define NOGIL_BYTES (64 * 1024)

enum { HASH_XXH3 = 0, HASH_BLAKE3 = 1 };

static PyObject *ndarray_type; /* numpy.ndarray: token_bytes reads only arrays' buffers */
static PyObject *str_tokens, *str_get, *str_startswith;

typedef struct {
    int kind;
    Py_ssize_t stride;
    XXH64_hash_t seed;
    uint8_t key[SECRET_BYTES];
    uint8_t *scratch; /* xxh3: parent || block, hashed in one call as keys.py does */
} hasher_t;

static int hasher_init(hasher_t *h, int kind, Py_ssize_t stride, const Py_buffer *secret) {
    h->kind = kind;
    h->stride = stride;
    h->scratch = NULL;
    if (kind != HASH_XXH3 && kind != HASH_BLAKE3) {
        PyErr_Format(PyExc_ValueError, "unknown hash kind %d", kind);
        return -1;
    }
    if (stride <= 0 || stride % 4) {
        PyErr_SetString(PyExc_ValueError, "stride must be a positive multiple of 4");
        return -1;
    }
    if (secret->len != SECRET_BYTES) {
        PyErr_SetString(PyExc_ValueError, "the namespace secret must be 32 bytes");
        return -1;
    }
    memcpy(h->key, secret->buf, SECRET_BYTES);
    const uint8_t *s = (const uint8_t *)secret->buf + 16;
    h->seed = 0;
    for (int i = 7; i >= 0; i--) h->seed = (h->seed << 8) | s[i];
    if (kind == HASH_XXH3) {
        h->scratch = PyMem_RawMalloc((size_t)stride + KEY_BYTES);
        if (h->scratch == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static void hasher_free(hasher_t *h) { PyMem_RawFree(h->scratch); }

/* out = H(parent || block); out may be parent. Needs no GIL. */
static void next_key(hasher_t *h, const uint8_t *parent, const uint8_t *block, uint8_t *out) {
    if (h->kind == HASH_XXH3) {
        memcpy(h->scratch, parent, KEY_BYTES);
        memcpy(h->scratch + KEY_BYTES, block, (size_t)h->stride);
        XXH128_hash_t v = XXH3_128bits_withSeed(h->scratch, (size_t)h->stride + KEY_BYTES, h->seed);
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, v);
        memcpy(out, c.digest, KEY_BYTES);
    } else {
        blake3_hasher b;
        blake3_hasher_init_keyed(&b, h->key);
        blake3_hasher_update(&b, parent, KEY_BYTES);
        blake3_hasher_update(&b, block, (size_t)h->stride);
        blake3_hasher_finalize(&b, out, KEY_BYTES);
    }
}

static int check_range(const Py_buffer *buf, Py_ssize_t stride, Py_ssize_t start, Py_ssize_t stop) {
    if (start < 0 || stop < start || stop > buf->len / stride) {
        PyErr_SetString(PyExc_ValueError, "block range outside the token buffer");
        return -1;
    }
    return 0;
}

/* ---- arguments ------------------------------------------------------------------------------ */

/* chain and walk take METH_FASTCALL arguments read by these: PyArg_ParseTuple's format walk, its
 * y* converters and the argument tuple were ~150 ns of a ~230 ns one-block walk call. The same
 * errors: TypeError for a wrong type, OverflowError for an int out of range. */
static int arg_count(const char *name, Py_ssize_t nargs, Py_ssize_t want) {
    if (nargs == want) return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, want, nargs);
    return -1;
}

static int arg_ssize(PyObject *o, Py_ssize_t *out) {
    *out = PyNumber_AsSsize_t(o, PyExc_OverflowError);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int arg_int(PyObject *o, int *out) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v > INT_MAX || v < INT_MIN) {
        PyErr_SetString(PyExc_OverflowError, "signed integer is greater than maximum");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Buffers b[0..n-1] of objects o[0..n-1], all or none (released on failure). */
static int arg_buffers(PyObject *const *o, Py_buffer *b, int n) {
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(o[i], &b[i], PyBUF_SIMPLE) < 0) {
            while (i--) PyBuffer_Release(&b[i]);
            return -1;
        }
    }
    return 0;
}

/* ---- chain ---------------------------------------------------------------------------------- */

static PyObject *chain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer bufs[3];
    Py_ssize_t stride, start, stop;
    int kind;
    if (arg_count("chain", nargs, 7) < 0 || arg_ssize(args[1], &stride) < 0 || arg_ssize(args[2], &start) < 0 ||
        arg_ssize(args[3], &stop) < 0 || arg_int(args[6], &kind) < 0)
        return NULL;
    PyObject *const objs[3] = {args[0], args[4], args[5]};
    if (arg_buffers(objs, bufs, 3) < 0) return NULL;
    Py_buffer buf = bufs[0], parent = bufs[1], secret = bufs[2];
    PyObject *out = NULL;
    uint8_t *keys = NULL;
    hasher_t h;
    if (hasher_init(&h, kind, stride, &secret) < 0) goto done;
    if (check_range(&buf, stride, start, stop) < 0) goto done;
    if (parent.len != KEY_BYTES) {
        PyErr_SetString(PyExc_ValueError, "the parent key must be 16 bytes");
        goto done;
    }
    Py_ssize_t n = stop - start;
    keys = PyMem_RawMalloc((size_t)(n > 0 ? n : 1) * KEY_BYTES);
    if (keys == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *data = (const uint8_t *)buf.buf + start * stride;
    const uint8_t *prev = parent.buf;
    /* The buffers are pinned by their Py_buffer: a long chain is hashed without the GIL. */
    PyThreadState *ts = n * stride >= NOGIL_BYTES ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        next_key(&h, prev, data + i * stride, keys + i * KEY_BYTES);
        prev = keys + i * KEY_BYTES;
    }
    if (ts != NULL) PyEval_RestoreThread(ts);
    out = PyList_New(n);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyBytes_FromStringAndSize((const char *)keys + i * KEY_BYTES, KEY_BYTES);
        if (k == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, k);
    }
done:
    PyMem_RawFree(keys);
    hasher_free(&h);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&parent);
    PyBuffer_Release(&secret);
    return out;
}

/* ---- walk ----------------------------------------------------------------------------------- */

/* shards[key[-1]].get(key), or get(key): a new reference, Py_None for a miss, NULL on error. */
static PyObject *find(PyObject *key, PyObject *shards, PyObject *get) {
    if (shards == Py_None) return PyObject_CallOneArg(get, key);
    PyObject *shard;
    if (PyBytes_CheckExact(key) && PyBytes_GET_SIZE(key) > 0 && PyList_CheckExact(shards)) {
        Py_ssize_t i = (uint8_t)PyBytes_AS_STRING(key)[PyBytes_GET_SIZE(key) - 1];
        if (i >= PyList_GET_SIZE(shards)) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            return NULL;
        }
        shard = PyList_GET_ITEM(shards, i);
        Py_INCREF(shard);
    } else {
        PyObject *last = PySequence_GetItem(key, -1);
        if (last == NULL) return NULL;
        shard = PyObject_GetItem(shards, last);
        Py_DECREF(last);
        if (shard == NULL) return NULL;
    }
    PyObject *item;
    if (PyDict_CheckExact(shard)) {
        item = PyDict_GetItemWithError(shard, key);
        if (item == NULL && PyErr_Occurred()) {
            Py_DECREF(shard);
            return NULL;
        }
        item = item == NULL ? Py_None : item;
        Py_INCREF(item);
    } else {
        item = PyObject_CallMethodOneArg(shard, str_get, key);
    }
    Py_DECREF(shard);
    return item;
}

/* buf.startswith(item.tokens, off): 1, 0, or -1 on error. */
static int same(PyObject *bufobj, const Py_buffer *buf, PyObject *item, Py_ssize_t off) {
    PyObject *tokens = PyObject_GetAttr(item, str_tokens);
    if (tokens == NULL) return -1;
    int r;
    if (PyBytes_CheckExact(tokens)) {
        Py_ssize_t len = PyBytes_GET_SIZE(tokens);
        r = len <= buf->len - off && memcmp((const char *)buf->buf + off, PyBytes_AS_STRING(tokens), (size_t)len) == 0;
    } else {
        PyObject *off_obj = PyLong_FromSsize_t(off);
        PyObject *res = off_obj ? PyObject_CallMethodObjArgs(bufobj, str_startswith, tokens, off_obj, NULL) : NULL;
        Py_XDECREF(off_obj);
        r = res == NULL ? -1 : PyObject_IsTrue(res);
        Py_XDECREF(res);
    }
    Py_DECREF(tokens);
    return r;
}

/* Look ``key`` up and verify it at ``off``: 1 appended to out, 0 a miss, -1 an error. */
static int step(PyObject *key, PyObject *shards, PyObject *get, PyObject *bufobj, const Py_buffer *buf,
                Py_ssize_t off, PyObject *out) {
    PyObject *item = find(key, shards, get);
    if (item == NULL) return -1;
    int r = 0;
    if (item != Py_None) {
        r = same(bufobj, buf, item, off);
        if (r == 1 && PyList_Append(out, item) < 0) r = -1;
    }
    Py_DECREF(item);
    return r;
}

static PyObject *walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer bufs[2], buf;
    Py_ssize_t stride, n;
    int kind;
    if (arg_count("walk", nargs, 9) < 0 || arg_ssize(args[1], &stride) < 0 || arg_ssize(args[2], &n) < 0 ||
        arg_int(args[6], &kind) < 0)
        return NULL;
    PyObject *bufobj = args[0], *keys = args[3], *shards = args[7], *get = args[8];
    if (!PyList_Check(keys)) {
        PyErr_Format(PyExc_TypeError, "walk() argument 4 must be list, not %.50s", Py_TYPE(keys)->tp_name);
        return NULL;
    }
    if (arg_buffers(args + 4, bufs, 2) < 0) return NULL;
    Py_buffer root = bufs[0], secret = bufs[1];
    PyObject *out = NULL, *snap = NULL;
    hasher_t h = {0};
    int have_buf = PyObject_GetBuffer(bufobj, &buf, PyBUF_SIMPLE) == 0;
    if (!have_buf) goto done;
    if (hasher_init(&h, kind, stride, &secret) < 0) goto done;
    if (check_range(&buf, stride, 0, n) < 0) goto done;
    if (root.len != KEY_BYTES) {
        PyErr_SetString(PyExc_ValueError, "the root key must be 16 bytes");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) goto done;
    /* A copy, as keys.py iterates keys[:n]: a callback cannot pull an item from under the loop. */
    Py_ssize_t known = PyList_GET_SIZE(keys), off = 0, i = 0;
    snap = PyList_GetSlice(keys, 0, known);
    if (snap == NULL) goto fail;
    for (; i < known && i < n; i++, off += stride) {  /* keys the prompt already knows */
        int r = step(PyList_GET_ITEM(snap, i), shards, get, bufobj, &buf, off, out);
        if (r < 0) goto fail;
        if (r == 0) goto done;
    }
    if (known >= n) goto done;
    uint8_t parent[KEY_BYTES];
    PyObject *last = known ? PyList_GET_ITEM(snap, known - 1) : NULL;
    if (last != NULL && (!PyBytes_Check(last) || PyBytes_GET_SIZE(last) != KEY_BYTES)) {
        PyErr_SetString(PyExc_ValueError, "a known key is not 16 bytes");
        goto fail;
    }
    memcpy(parent, last ? (const uint8_t *)PyBytes_AS_STRING(last) : (const uint8_t *)root.buf, KEY_BYTES);
    for (i = known; i < n; i++, off += stride) {  /* hashed lazily: a miss at block 0 hashes one */
        next_key(&h, parent, (const uint8_t *)buf.buf + off, parent);
        PyObject *key = PyBytes_FromStringAndSize((const char *)parent, KEY_BYTES);
        if (key == NULL) goto fail;
        int r = PyList_Append(keys, key) < 0 ? -1 : step(key, shards, get, bufobj, &buf, off, out);
        Py_DECREF(key);
        if (r < 0) goto fail;
        if (r == 0) break;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(snap);
    hasher_free(&h);
    if (have_buf) PyBuffer_Release(&buf);
    PyBuffer_Release(&root);
    PyBuffer_Release(&secret);
    return out;
}

/* ---- token_bytes ---------------------------------------------------------------------------- */

/* An id as little-endian int32 bytes ("<i4"). */
static inline void put_le32(char *p, uint32_t v) {
#if PY_LITTLE_ENDIAN
    memcpy(p, &v, 4);
#else
    p[0] = (char)(v & 0xff);
    p[1] = (char)((v >> 8) & 0xff);
    p[2] = (char)((v >> 16) & 0xff);
    p[3] = (char)(v >> 24);
#endif
}

/* An exact int's value read from its layout when it has at most two digits: 1 with *v set, 0 when it
 * is larger or negative (the caller asks the C API, which decides). A list of 32k ids took ~2.3 ns
 * an item through PyLong_AsLongLongAndOverflow; an id is almost always one digit. */
static inline int compact_id(PyObject *t, long long *v) {
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)t)) return 0;
    *v = (long long)PyUnstable_Long_CompactValue((PyLongObject *)t);
    return 1;
#else
    Py_ssize_t size = Py_SIZE(t);
    const digit *d = ((PyLongObject *)t)->ob_digit;
    if (size == 1) *v = d[0];
    else if (size == 0) *v = 0;
    else if (size == 2) *v = (long long)d[0] | ((long long)d[1] << PyLong_SHIFT);
    else return 0;
    return 1;
#endif
}

/* A list or tuple of exact ints in [0, 2**31): "<i4" bytes, else None. */
static PyObject *seq_bytes(PyObject *seq) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    Py_ssize_t i = 0;
#if PY_VERSION_HEX < 0x030C0000
    /* The usual id, one digit: a tight loop until another kind of item, which the loop below takes. */
    for (; i < n; i++) {
        PyObject *t = items[i];
        if (!PyLong_CheckExact(t) || Py_SIZE(t) != 1) break;
        put_le32(p + 4 * i, (uint32_t)((PyLongObject *)t)->ob_digit[0]);
    }
#endif
    for (; i < n; i++) {
        PyObject *t = items[i];
        int overflow = 0;
        long long v = -1;
        if (!PyLong_CheckExact(t)) v = -1;  /* bool, a numpy scalar, anything else: keys.py decides */
        else if (!compact_id(t, &v)) v = PyLong_AsLongLongAndOverflow(t, &overflow);
        if (v < 0 || v > INT32_MAX_ID || overflow) {
            Py_DECREF(out);
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        put_le32(p + 4 * i, (uint32_t)v);
    }
    return out;
}

/* n items of type T at src to "<i4" at dst: 0, or -1 when one is outside [0, 2**31) (dst then
 * partly written). One branch-free pass the compiler vectorises: ~36 µs -> a few for 32k int64
 * ids, the switch per item it replaces. A signed item is widened with its sign, so a negative one
 * has high bits set, as has one past 2**31 - 1. */
#define CONVERT(T, WIDE)                                                                  \
    do {                                                                                  \
        uint64_t bad = 0;                                                                 \
        for (Py_ssize_t i = 0; i < n; i++) {                                              \
            T x;                                                                          \
            memcpy(&x, src + i * sizeof(T), sizeof(T));                                   \
            bad |= (uint64_t)(WIDE)x >> 31; /* a shift, not a compare: SSE2 has no 64-bit one */ \
            put_le32(dst + 4 * i, (uint32_t)x);                                           \
        }                                                                                 \
        return bad ? -1 : 0;                                                              \
    } while (0)

static int convert(const char *src, char *dst, Py_ssize_t n, int is_signed, Py_ssize_t sz) {
    switch (sz * 2 + is_signed) {
    case 2: CONVERT(uint8_t, uint64_t);
    case 3: CONVERT(int8_t, int64_t);
    case 4: CONVERT(uint16_t, uint64_t);
    case 5: CONVERT(int16_t, int64_t);
    case 8: CONVERT(uint32_t, uint64_t);
    case 9: CONVERT(int32_t, int64_t);
    case 16: CONVERT(uint64_t, uint64_t);
    default: CONVERT(int64_t, int64_t);
    }
}

/* A 1-D C-contiguous ndarray of native-order integers in [0, 2**31): its ids as int32 bytes (the
 * native int32 case a copy of its buffer, as arr.tobytes()), else None. */
static PyObject *array_bytes(PyObject *arr) {
    Py_buffer v;
    if (PyObject_GetBuffer(arr, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *out = Py_None;
    const char *f = v.format ? v.format : "B";
    if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN) || (*f == '>' && !PY_LITTLE_ENDIAN)) f++;
    Py_ssize_t sz = v.itemsize, n = v.ndim == 1 ? v.shape[0] : -1;
    if (n < 0 || f[0] == '\0' || f[1] != '\0' || !strchr("bBhHiIlLqQnN", f[0]) || !(sz == 1 || sz == 2 || sz == 4 || sz == 8))
        goto done;
    out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL) goto done;
    int is_signed = strchr("bhilqn", f[0]) != NULL;
    if (convert(v.buf, PyBytes_AS_STRING(out), n, is_signed, sz) < 0) Py_SETREF(out, Py_None);  /* counted at done */
done:
    if (out == Py_None) Py_INCREF(out);
    PyBuffer_Release(&v);
    return out;
}

static PyObject *token_bytes(PyObject *self, PyObject *tokens) {
    if (PyList_CheckExact(tokens) || PyTuple_CheckExact(tokens)) return seq_bytes(tokens);
    int is_array = PyObject_IsInstance(tokens, ndarray_type);
    if (is_array < 0) return NULL;
    if (is_array) return array_bytes(tokens);
    Py_RETURN_NONE;
}

/* ---- shard_get_many -------------------------------------------------------------------------- */

/* [shards[hash(k) % p].get(k) for k in keys]: the memory tier's get_many (tiers/memory.py, its
 * reference), ~90 ns a key in Python. shards: a list of p dicts; keys: a list or tuple. */
static PyObject *shard_get_many(PyObject *self, PyObject *args) {
    PyObject *shards, *keys;
    Py_ssize_t p;
    if (!PyArg_ParseTuple(args, "O!On", &PyList_Type, &shards, &keys, &p)) return NULL;
    if (p <= 0 || PyList_GET_SIZE(shards) < p) {
        PyErr_SetString(PyExc_ValueError, "shard_get_many needs at least p shards");
        return NULL;
    }
    /* A list is copied, as the comprehension's iterator would not let a key's __eq__ that shrinks
     * it pull an item from under the loop. */
    PyObject *seq = PyList_CheckExact(keys) ? PyList_GetSlice(keys, 0, PyList_GET_SIZE(keys))
                                            : PySequence_Fast(keys, "keys must be iterable");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *k = items[i];
        Py_hash_t h = PyObject_Hash(k);
        if (h == -1 && PyErr_Occurred()) goto fail;
        Py_ssize_t at = (Py_ssize_t)(h % p);
        if (at < 0) at += p;  /* Python's % is never negative for a positive p */
        PyObject *shard = PyList_GET_ITEM(shards, at), *v;
        if (PyDict_CheckExact(shard)) {
            v = PyDict_GetItemWithError(shard, k);
            if (v == NULL && PyErr_Occurred()) goto fail;
            v = v == NULL ? Py_None : v;
            Py_INCREF(v);
        } else if ((v = PyObject_CallMethodOneArg(shard, str_get, k)) == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(out, i, v);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

/* ---- module --------------------------------------------------------------------------------- */

PyObject *ctxcache_table_prefix(PyObject *self, PyObject *args); /* ctxcache_table.c: the router index */
PyObject *ctxcache_table_upsert(PyObject *self, PyObject *args); /* ctxcache_table.c: its inserts */
PyObject *ctxcache_stored_run(PyObject *self, PyObject *args);   /* ctxcache_events.c: the KV events */
PyObject *ctxcache_run_meta(PyObject *self, PyObject *args);
PyObject *ctxcache_encode_events(PyObject *self, PyObject *args); /* ctxcache_encode.c: their encoder */
PyObject *ctxcache_fd_send(PyObject *self, PyObject *args);       /* ctxcache_encode.c: their fast lane */
PyObject *ctxcache_fd_recv(PyObject *self, PyObject *args);
int ctxcache_add_order(PyObject *m);                            /* ctxcache_order.c: the LRU/FIFO order */
int ctxcache_add_blocks(PyObject *m);                           /* ctxcache_blocks*.c: the block table */
int ctxcache_add_replay(PyObject *m);                           /* ctxcache_replay*.c: the simulator's loops */

static PyMethodDef methods[] = {
    {"token_bytes", token_bytes, METH_O, "as_token_array(tokens).tobytes(), or None: let keys.py decide."},
    {"chain", (PyCFunction)(void (*)(void))chain, METH_FASTCALL, "chain(buf, stride, start, stop, parent, secret, kind) -> keys of blocks start..stop-1"},
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL, "walk(buf, stride, n, keys, root, secret, kind, shards, get) -> matched items"},
    {"shard_get_many", shard_get_many, METH_VARARGS, "shard_get_many(shards, keys, p) -> [shards[hash(k) % p].get(k) for k in keys]"},
    {"table_prefix", ctxcache_table_prefix, METH_VARARGS,
     "table_prefix(keys, lo, hi, fast, slow, shared, readers, cap, bits) -> (counts, fast masks, slow masks)"},
    {"table_upsert", ctxcache_table_upsert, METH_VARARGS,
     "table_upsert(lo_keys, hi_keys, lo, hi, cap, limit, max_used, used, out) -> (done, used, why)"},
    {"stored_run", ctxcache_stored_run, METH_VARARGS,
     "stored_run(records, i, pos, nodes, owners, tier, block_size, cls, kb, out) -> next i"},
    {"run_meta", ctxcache_run_meta, METH_VARARGS, "run_meta(keys, nodes, owners) -> (parents, sizes)"},
    {"encode_events", ctxcache_encode_events, METH_VARARGS,
     "encode_events(events, version, stored_cls, removed_cls, reasons) -> bytes, or None: codec.encode_events"},
    {"fd_send", ctxcache_fd_send, METH_VARARGS, "fd_send(fd, data) -> bytes sent, non-blocking, the GIL held"},
    {"fd_recv", ctxcache_fd_recv, METH_VARARGS, "fd_recv(fd, n) -> bytes (b'' at EOF) or None, non-blocking, the GIL held"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "ctxcache._native", "The compiled key walk.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL) return NULL;
    ndarray_type = PyObject_GetAttrString(np, "ndarray");
    Py_DECREF(np);
    str_tokens = PyUnicode_InternFromString("tokens");
    str_get = PyUnicode_InternFromString("get");
    str_startswith = PyUnicode_InternFromString("startswith");
    if (!ndarray_type || !str_tokens || !str_get || !str_startswith) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "XXH_VERSION", "0.8.2") < 0 ||
        PyModule_AddStringConstant(m, "BLAKE3_VERSION", BLAKE3_VERSION_STRING) < 0 || ctxcache_add_order(m) < 0 ||
        ctxcache_add_blocks(m) < 0 || ctxcache_add_replay(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
