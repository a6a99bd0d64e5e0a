/* ctxcache._native: the compiled key walk (docs/ARCHITECTURE.md, "The native module").
 *
 * Three functions, each the exact counterpart of pure-Python code in src/ctxcache/keys.py, which
 * stays the reference and the fallback (tests/test_native.py checks one against the other):
 *
 *   token_bytes(tokens)  -> bytes | None   as_token_array(tokens).tobytes(), or None where the
 *                                           Python path must decide (and name the error)
 *   chain(buf, stride, start, stop, parent, secret, kind) -> list[bytes]   BlockHasher._stream
 *   walk(buf, stride, n, keys, root, secret, kind, shards, get) -> list    BlockHasher.walk
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

/* ---- chain ---------------------------------------------------------------------------------- */

static PyObject *chain(PyObject *self, PyObject *args) {
    Py_buffer buf, parent, secret;
    Py_ssize_t stride, start, stop;
    int kind;
    if (!PyArg_ParseTuple(args, "y*nnny*y*i", &buf, &stride, &start, &stop, &parent, &secret, &kind))
        return NULL;
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

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *bufobj, *keys, *shards, *get;
    Py_buffer root, secret, buf;
    Py_ssize_t stride, n;
    int kind;
    if (!PyArg_ParseTuple(args, "OnnO!y*y*iOO", &bufobj, &stride, &n, &PyList_Type, &keys, &root, &secret, &kind,
                          &shards, &get))
        return NULL;
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

static void put_le32(char *p, uint32_t v) {
    p[0] = (char)(v & 0xff);
    p[1] = (char)((v >> 8) & 0xff);
    p[2] = (char)((v >> 16) & 0xff);
    p[3] = (char)(v >> 24);
}

/* A list or tuple of exact ints in [0, 2**31): "<i4" bytes, else None. */
static PyObject *seq_bytes(PyObject *seq) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 4);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = items[i];
        int overflow = 0;
        long long v = PyLong_CheckExact(t) ? PyLong_AsLongLongAndOverflow(t, &overflow) : -1;
        if (v < 0 || v > INT32_MAX_ID || overflow) {  /* not an id, or bool, or a numpy scalar */
            Py_DECREF(out);
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        put_le32(p + 4 * i, (uint32_t)v);
    }
    return out;
}

/* Read element i of a 1-D integer buffer of format c, itemsize sz; -1 if out of [0, 2**31). */
static long long element(const char *p, char c, Py_ssize_t sz) {
    int is_signed = c == 'b' || c == 'h' || c == 'i' || c == 'l' || c == 'q' || c == 'n';
    switch (sz) {
    case 1: return is_signed ? *(const int8_t *)p : *(const uint8_t *)p;
    case 2: { int16_t s; uint16_t u; memcpy(&s, p, 2); memcpy(&u, p, 2); return is_signed ? s : u; }
    case 4: { int32_t s; uint32_t u; memcpy(&s, p, 4); memcpy(&u, p, 4); return is_signed ? s : (long long)u; }
    default: {
        int64_t s; uint64_t u;
        memcpy(&s, p, 8);
        memcpy(&u, p, 8);
        if (is_signed) return s;
        return u > (uint64_t)INT32_MAX_ID ? -1 : (long long)u;
    }
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
    char *p = PyBytes_AS_STRING(out);
    const char *src = v.buf;
    if (sz == 4 && strchr("ilnq", f[0]) != NULL) {  /* native int32: the sign bits, then one copy */
        uint32_t any = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, src + 4 * i, 4);
            any |= u;
        }
        if (any & 0x80000000u) {
            Py_SETREF(out, Py_None);  /* counted at done */
            goto done;
        }
        memcpy(p, src, (size_t)n * 4);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long x = element(src + i * sz, f[0], sz);
        if (x < 0 || x > INT32_MAX_ID) {
            Py_SETREF(out, Py_None);  /* counted at done */
            goto done;
        }
        put_le32(p + 4 * i, (uint32_t)x);
    }
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

/* ---- module --------------------------------------------------------------------------------- */

PyObject *ctxcache_table_prefix(PyObject *self, PyObject *args); /* ctxcache_table.c: the router index */
PyObject *ctxcache_table_upsert(PyObject *self, PyObject *args); /* ctxcache_table.c: its inserts */
PyObject *ctxcache_stored_run(PyObject *self, PyObject *args);   /* ctxcache_events.c: the KV events */
PyObject *ctxcache_run_meta(PyObject *self, PyObject *args);
PyObject *ctxcache_encode_events(PyObject *self, PyObject *args); /* ctxcache_encode.c: their encoder */
PyObject *ctxcache_fd_send(PyObject *self, PyObject *args);       /* ctxcache_encode.c: their fast lane */
PyObject *ctxcache_fd_recv(PyObject *self, PyObject *args);
int ctxcache_add_order(PyObject *m);                            /* ctxcache_order.c: the LRU/FIFO order */

static PyMethodDef methods[] = {
    {"token_bytes", token_bytes, METH_O, "as_token_array(tokens).tobytes(), or None: let keys.py decide."},
    {"chain", chain, METH_VARARGS, "chain(buf, stride, start, stop, parent, secret, kind) -> keys of blocks start..stop-1"},
    {"walk", walk, METH_VARARGS, "walk(buf, stride, n, keys, root, secret, kind, shards, get) -> matched items"},
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
        PyModule_AddStringConstant(m, "BLAKE3_VERSION", BLAKE3_VERSION_STRING) < 0 || ctxcache_add_order(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
