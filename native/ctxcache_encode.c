/* ctxcache._native.encode_events: events/codec.py's encode_events for the hot kinds, compiled.
 *
 *   encode_events(events, version, stored_cls, removed_cls, reasons) -> bytes, or None
 *
 * ``events`` a tuple of BlockStored (without token ids) and BlockRemoved only; anything else, or a
 * field the Python encoder would refuse (a tier or parent over 255 bytes, keys of mixed widths or
 * not bytes, a size out of range, an unknown reason), gives None and codec.encode_events encodes
 * the batch itself (and raises what it raises). The bytes are the Python encoder's
 * (tests/events/test_native_encode.py checks both on random batches). The encoder ran once per
 * batch on the publisher's thread at ~3.5 µs an event (docs/events.md, "Benchmark").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *s_keys, *s_tier, *s_parent, *s_block_size, *s_size, *s_token_ids, *s_reason;

static int names(void) {
    if (s_keys) return 0;
    s_keys = PyUnicode_InternFromString("keys");
    s_tier = PyUnicode_InternFromString("tier");
    s_parent = PyUnicode_InternFromString("parent");
    s_block_size = PyUnicode_InternFromString("block_size");
    s_size = PyUnicode_InternFromString("size");
    s_token_ids = PyUnicode_InternFromString("token_ids");
    s_reason = PyUnicode_InternFromString("reason");
    return (s_keys && s_tier && s_parent && s_block_size && s_size && s_token_ids && s_reason) ? 0 : -1;
}

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} out_t;

static int put(out_t *o, const void *p, Py_ssize_t n) {
    if (o->len + n > o->cap) {
        Py_ssize_t cap = o->cap * 2 > o->len + n ? o->cap * 2 : o->len + n + 256;
        char *b = PyMem_Realloc(o->buf, cap);
        if (b == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
    return 0;
}

static int put_u8(out_t *o, unsigned v) {
    unsigned char c = (unsigned char)v;
    return put(o, &c, 1);
}

static int put_le(out_t *o, unsigned long long v, int n) {
    unsigned char b[8];
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(v >> (8 * i));
    return put(o, b, n);
}

/* The helpers below return 1: encoded; 0: not this fast path's (no Python error set); -1: an error. */

static int put_str(out_t *o, PyObject *s) {
    if (!PyUnicode_CheckExact(s)) return 0;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) {
        PyErr_Clear(); /* a surrogate: the Python encoder raises its own error */
        return 0;
    }
    if (n > 255) return 0;
    return put_u8(o, (unsigned)n) < 0 || put(o, u, n) < 0 ? -1 : 1;
}

static int put_keys(out_t *o, PyObject *keys) {
    if (!PyTuple_CheckExact(keys)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(keys), width = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        if (!PyBytes_CheckExact(k)) return 0;
        if (i == 0) width = PyBytes_GET_SIZE(k);
        else if (PyBytes_GET_SIZE(k) != width) return 0;
    }
    if (width > 255 || n > 0xFFFFFFFFLL) return 0; /* bytes((width,)) refuses > 255 */
    if (put_le(o, (unsigned long long)n, 4) < 0 || put_u8(o, (unsigned)width) < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (put(o, PyBytes_AS_STRING(PyTuple_GET_ITEM(keys, i)), width) < 0) return -1;
    return 1;
}

static int put_uint(out_t *o, PyObject *v, int n) {
    if (!PyLong_CheckExact(v)) return 0;
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or too big: struct.pack raises */
        return 0;
    }
    if (n == 4 && x > 0xFFFFFFFFULL) return 0;
    return put_le(o, x, n) < 0 ? -1 : 1;
}

static int stored(out_t *o, PyObject *ev) {
    PyObject *f[6] = {NULL, NULL, NULL, NULL, NULL, NULL}; /* token_ids, tier, parent, block_size, size, keys */
    PyObject *const nm[6] = {s_token_ids, s_tier, s_parent, s_block_size, s_size, s_keys};
    int rc = -1;
    for (int i = 0; i < 6; i++)
        if ((f[i] = PyObject_GetAttr(ev, nm[i])) == NULL) goto done;
    PyObject *tier = f[1], *parent = f[2];
    rc = 0;
    if (f[0] != Py_None || (parent != Py_None && (!PyBytes_CheckExact(parent) || PyBytes_GET_SIZE(parent) > 255)))
        goto done;
    rc = -1;
    if (put_u8(o, 1) < 0) goto done;
    if ((rc = put_str(o, tier)) <= 0) goto done;
    rc = -1;
    if (put_u8(o, parent != Py_None ? 1 : 0) < 0) goto done;
    if (parent != Py_None && (put_u8(o, (unsigned)PyBytes_GET_SIZE(parent)) < 0 ||
                              put(o, PyBytes_AS_STRING(parent), PyBytes_GET_SIZE(parent)) < 0))
        goto done;
    if ((rc = put_uint(o, f[3], 4)) <= 0 || (rc = put_uint(o, f[4], 8)) <= 0) goto done;
    rc = put_keys(o, f[5]);
done:
    for (int i = 0; i < 6; i++) Py_XDECREF(f[i]);
    return rc;
}

static int removed(out_t *o, PyObject *ev, PyObject *reasons) {
    PyObject *tier = PyObject_GetAttr(ev, s_tier);
    PyObject *reason = tier ? PyObject_GetAttr(ev, s_reason) : NULL;
    PyObject *keys = reason ? PyObject_GetAttr(ev, s_keys) : NULL;
    int rc = -1, r;
    if (keys == NULL) goto done;
    Py_ssize_t at = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(reasons); i++) {
        int eq = PyUnicode_CheckExact(reason) ? PyUnicode_Compare(reason, PyTuple_GET_ITEM(reasons, i)) : 1;
        if (eq == -1 && PyErr_Occurred()) goto done;
        if (eq == 0) {
            at = i;
            break;
        }
    }
    if (at < 0 || at > 255) {
        rc = 0;
        goto done;
    }
    if (put_u8(o, 2) < 0) goto done;
    if ((r = put_str(o, tier)) <= 0) {
        rc = r;
        goto done;
    }
    if (put_u8(o, (unsigned)at) < 0) goto done;
    rc = put_keys(o, keys);
done:
    Py_XDECREF(tier); Py_XDECREF(reason); Py_XDECREF(keys);
    return rc;
}

PyObject *ctxcache_encode_events(PyObject *self, PyObject *args) {
    PyObject *events, *scls, *rcls, *reasons;
    unsigned char version;
    if (!PyArg_ParseTuple(args, "O!bOOO!", &PyTuple_Type, &events, &version, &scls, &rcls, &PyTuple_Type, &reasons))
        return NULL;
    if (names() < 0) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(events);
    if (n > 0xFFFFFFFFLL) Py_RETURN_NONE;
    out_t o = {NULL, 0, 0};
    int rc = put_u8(&o, version) < 0 || put_le(&o, (unsigned long long)n, 4) < 0 ? -1 : 1;
    for (Py_ssize_t i = 0; i < n && rc == 1; i++) {
        PyObject *ev = PyTuple_GET_ITEM(events, i);
        if ((PyObject *)Py_TYPE(ev) == scls) rc = stored(&o, ev);
        else if ((PyObject *)Py_TYPE(ev) == rcls) rc = removed(&o, ev, reasons);
        else rc = 0;
    }
    PyObject *res = rc == 1 ? PyBytes_FromStringAndSize(o.buf, o.len) : NULL;
    PyMem_Free(o.buf);
    if (rc == 0) Py_RETURN_NONE;
    return res;
}

/* fd_send(fd, data) -> bytes sent; fd_recv(fd, n) -> bytes (b"" at EOF), or None when nothing is
 * there. Non-blocking (MSG_DONTWAIT) and with the GIL held: the publisher's fast path
 * (events/fastlane.py) calls them on the emitter's thread, where releasing the GIL for a
 * syscall of a few µs hands it to a busy request thread and costs a forced switch back (~50 µs
 * of CPU and up to the switch interval, 5 ms) each time. */
#include <errno.h>
#ifndef _WIN32
#include <sys/socket.h>
#ifndef MSG_NOSIGNAL /* macOS: no such flag (SIGPIPE is ignored by Python anyway) */
#define MSG_NOSIGNAL 0
#endif

PyObject *ctxcache_fd_send(PyObject *self, PyObject *args) {
    int fd;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "iy*", &fd, &b)) return NULL;
    Py_ssize_t done = 0;
    while (done < b.len) {
        ssize_t n = send(fd, (const char *)b.buf + done, (size_t)(b.len - done), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            PyBuffer_Release(&b);
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        done += n;
    }
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(done);
}

PyObject *ctxcache_fd_recv(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "in", &fd, &cap)) return NULL;
    if (cap <= 0) cap = 65536;
    PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL) return NULL;
    ssize_t n;
    do n = recv(fd, PyBytes_AS_STRING(out), (size_t)cap, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        Py_DECREF(out);
        if (errno == EAGAIN || errno == EWOULDBLOCK) Py_RETURN_NONE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (n != cap) _PyBytes_Resize(&out, n);
    return out;
}
#else /* Windows: the fast lane falls back to Python's socket calls (events/fastlane.py) */
PyObject *ctxcache_fd_send(PyObject *self, PyObject *args) {
    PyErr_SetString(PyExc_NotImplementedError, "fd_send");
    return NULL;
}
PyObject *ctxcache_fd_recv(PyObject *self, PyObject *args) {
    PyErr_SetString(PyExc_NotImplementedError, "fd_recv");
    return NULL;
}
#endif
