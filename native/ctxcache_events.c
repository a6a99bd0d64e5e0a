/* ctxcache._native.stored_run: the KV events' per-block loop (src/ctxcache/events/watch.py,
 * EngineWatch.stored_run_py stays the reference and the fallback; tests/events/test_native_run.py
 * checks one against the other on random runs).
 *
 *   stored_run(records, i, pos, nodes, owners, tier, block_size, cls, kb, out) -> next i
 *
 * From records[i] on, while a record is ("a", pos, key) or ("c", pos, [key, ...]) (a chain's keys as
 * admitted, one record for a store: EngineWatch.admitted_run): look the key up in the index's shards
 * (``nodes``, a list of dicts picked as shardmap.index_shard does) for its parent and in the slot's
 * owners' shards (``owners``, shardmap.owner_shard) for its size, and grow chains at either end as
 * emitter._Chain does; each chain becomes one ``cls(keys, tier, parent, block_size, size)`` appended
 * to ``out``. ``kb`` is tiers.base.key_bytes, called only for keys that are not bytes. This loop ran
 * once per stored block in Python and was most of the events' CPU (docs/events.md, "Benchmark").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyObject *s_parent, *s_depth, *s_a, *s_c, *s_k;

static Py_ssize_t pymod(Py_hash_t h, Py_ssize_t m) { /* Python's %: the divisor's sign */
    Py_ssize_t r = (Py_ssize_t)(h % m);
    return r < 0 ? r + m : r;
}

static PyObject *shard(PyObject *shards, Py_ssize_t i) {
    if (i >= PyList_GET_SIZE(shards)) {
        PyErr_SetString(PyExc_IndexError, "shard index out of range");
        return NULL;
    }
    PyObject *d = PyList_GET_ITEM(shards, i);
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "shards must be dicts");
        return NULL;
    }
    return d;
}

static PyObject *as_bytes(PyObject *key, PyObject *kb) {
    if (PyBytes_CheckExact(key)) return Py_NewRef(key);
    return PyObject_CallOneArg(kb, key);
}

/* BlockStored(keys, tier, parent, block_size, size) built through its slots' descriptors, as its
 * frozen dataclass __init__ does (object.__setattr__ per field) but without running Python code:
 * that call was ~1.8 µs an event. ``cls`` other than a type with those six slots is called. */
static PyObject *d_cls, *d_slot[6];

static int slots_of(PyObject *cls) {
    static const char *names[6] = {"keys", "tier", "parent", "block_size", "size", "token_ids"};
    if (cls == d_cls) return 1;
    if (!PyType_Check(cls)) return 0;
    PyObject *got[6];
    for (int i = 0; i < 6; i++) {
        got[i] = PyObject_GetAttrString(cls, names[i]);
        if (got[i] == NULL || Py_TYPE(got[i])->tp_descr_set == NULL || !PyObject_TypeCheck(got[i], &PyMemberDescr_Type)) {
            PyErr_Clear();
            for (int j = 0; j <= i; j++) Py_XDECREF(got[j]);
            return 0;
        }
    }
    for (int i = 0; i < 6; i++) Py_XSETREF(d_slot[i], got[i]);
    Py_XSETREF(d_cls, Py_NewRef(cls));
    return 1;
}

static PyObject *new_stored(PyObject *cls, PyObject *keys, PyObject *tier, PyObject *parent, PyObject *bs, PyObject *size) {
    if (!slots_of(cls)) return PyObject_CallFunctionObjArgs(cls, keys, tier, parent, bs, size, NULL);
    PyTypeObject *t = (PyTypeObject *)cls;
    PyObject *ev = t->tp_alloc(t, 0);
    PyObject *vals[6] = {keys, tier, parent, bs, size, Py_None};
    for (int i = 0; ev != NULL && i < 6; i++)
        if (Py_TYPE(d_slot[i])->tp_descr_set(d_slot[i], ev, vals[i]) < 0) Py_CLEAR(ev);
    return ev;
}

typedef struct {
    PyObject *front, *back; /* keys (bytes) prepended, in the order taken, and appended */
    PyObject *top, *last;   /* the chain's parent and last key, engine form (owned; top may be None) */
    long long size;
} chain_t;

static int chain_emit(chain_t *c, PyObject *tier, PyObject *bs, PyObject *cls, PyObject *kb, PyObject *out) {
    Py_ssize_t nf = PyList_GET_SIZE(c->front), nb = PyList_GET_SIZE(c->back);
    PyObject *keys = PyTuple_New(nf + nb);
    if (keys == NULL) return -1;
    for (Py_ssize_t j = 0; j < nf; j++) PyTuple_SET_ITEM(keys, j, Py_NewRef(PyList_GET_ITEM(c->front, nf - 1 - j)));
    for (Py_ssize_t j = 0; j < nb; j++) PyTuple_SET_ITEM(keys, nf + j, Py_NewRef(PyList_GET_ITEM(c->back, j)));
    PyObject *parent = c->top == Py_None ? Py_NewRef(Py_None) : as_bytes(c->top, kb);
    PyObject *size = parent ? PyLong_FromLongLong(c->size) : NULL;
    PyObject *ev = size ? new_stored(cls, keys, tier, parent, bs, size) : NULL;
    Py_DECREF(keys);
    Py_XDECREF(parent);
    Py_XDECREF(size);
    if (ev == NULL) return -1;
    int rc = PyList_Append(out, ev);
    Py_DECREF(ev);
    return rc;
}

static void chain_clear(chain_t *c) {
    Py_CLEAR(c->front);
    Py_CLEAR(c->back);
    Py_CLEAR(c->top);
    Py_CLEAR(c->last);
    c->size = 0;
}

/* A node's slot read at its member's offset (index.Node has __slots__), past the attribute lookup
 * (the type's MRO walked per read: half of run_meta's time); any other type, or an unset slot,
 * goes through PyObject_GetAttr. */
static PyTypeObject *n_type;
static Py_ssize_t off_depth = -1, off_parent = -1;

static Py_ssize_t member_offset(PyTypeObject *t, PyObject *name) {
    PyObject *d = PyObject_GetAttr((PyObject *)t, name);
    Py_ssize_t off = -1;
    if (d == NULL) PyErr_Clear();
    else if (PyObject_TypeCheck(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX)
        off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_XDECREF(d);
    return off;
}

static PyObject *node_get(PyObject *node, int which) {
    if (Py_TYPE(node) != n_type) {
        Py_XSETREF(n_type, (PyTypeObject *)Py_NewRef(Py_TYPE(node)));
        off_depth = member_offset(n_type, s_depth);
        off_parent = member_offset(n_type, s_parent);
    }
    Py_ssize_t off = which ? off_parent : off_depth;
    PyObject *v = off >= 0 ? *(PyObject **)((char *)node + off) : NULL;
    return v != NULL ? Py_NewRef(v) : PyObject_GetAttr(node, which ? s_parent : s_depth);
}

/* One stored block's parent and size (new references; None for a namespace root or an unknown
 * key, 0 for a block the slot does not charge); -1 on an error. */
static int block(PyObject *key, PyObject *nodes, PyObject *owners, PyObject **parent, PyObject **size) {
    Py_hash_t h = PyObject_Hash(key);
    if (h == -1) return -1;
    Py_ssize_t n = PyBytes_CheckExact(key) ? PyBytes_GET_SIZE(key) : 0;
    PyObject *d = shard(nodes, n ? (unsigned char)PyBytes_AS_STRING(key)[n - 1] : pymod(h, 251));
    if (d == NULL) return -1;
    PyObject *node = PyDict_GetItemWithError(d, key);
    if (node == NULL && PyErr_Occurred()) return -1;
    *parent = Py_NewRef(Py_None);
    if (node != NULL) {
        Py_INCREF(node);
        PyObject *depth = node_get(node, 0);
        int deep = depth ? PyObject_IsTrue(depth) : -1; /* depth > 0: depths are never negative */
        Py_XDECREF(depth);
        if (deep > 0) {
            PyObject *p = node_get(node, 1);
            if (p == NULL) deep = -1;
            else Py_SETREF(*parent, p);
        }
        Py_DECREF(node);
        if (deep < 0) {
            Py_CLEAR(*parent);
            return -1;
        }
    }
    d = shard(owners, pymod(h, 239));
    PyObject *got = d ? PyDict_GetItemWithError(d, key) : NULL;
    if (got == NULL && (d == NULL || PyErr_Occurred())) {
        Py_CLEAR(*parent);
        return -1;
    }
    if (got != NULL && PyTuple_Check(got) && PyTuple_GET_SIZE(got) > 1) *size = Py_NewRef(PyTuple_GET_ITEM(got, 1));
    else *size = PyLong_FromLong(0);
    if (*size == NULL) Py_CLEAR(*parent);
    return *size == NULL ? -1 : 0;
}

/* 'a' for ("a", pos, key), 'c' for ("c", pos, [keys]) (a chain admitted at once: its keys as so
 * many "a" records), 0 for any other record, which ends the run. */
static int kind_of(PyObject *rec, long pos) {
    if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) < 3) return 0;
    PyObject *k = PyTuple_GET_ITEM(rec, 0);
    int kind = k == s_a ? 'a' : k == s_c ? 'c' : k == s_k ? 'k' : 0;
    if (!kind && PyUnicode_Check(k)) {
        kind = PyUnicode_CompareWithASCIIString(k, "a") == 0   ? 'a'
               : PyUnicode_CompareWithASCIIString(k, "c") == 0 ? 'c'
               : PyUnicode_CompareWithASCIIString(k, "k") == 0 ? 'k'
                                                               : 0;
    }
    if (kind == 'k') { /* ("k", pos, keys joined, width, parent, size): EngineWatch.chain */
        if (PyTuple_GET_SIZE(rec) != 6 || !PyBytes_CheckExact(PyTuple_GET_ITEM(rec, 2)) ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(rec, 3)) || !PyLong_Check(PyTuple_GET_ITEM(rec, 5)))
            return 0;
        Py_ssize_t w = PyLong_AsSsize_t(PyTuple_GET_ITEM(rec, 3));
        if (w <= 0 || PyBytes_GET_SIZE(PyTuple_GET_ITEM(rec, 2)) % w != 0) {
            PyErr_Clear();
            return 0;
        }
    }
    if (!kind || (kind == 'c' && !PyList_Check(PyTuple_GET_ITEM(rec, 2)))) return 0;
    if (kind == 'c' && PyTuple_GET_SIZE(rec) >= 5) { /* captured: parents and sizes, one each per key */
        PyObject *ps = PyTuple_GET_ITEM(rec, 3), *zs = PyTuple_GET_ITEM(rec, 4);
        Py_ssize_t n = PyList_GET_SIZE(PyTuple_GET_ITEM(rec, 2));
        if (PyList_Check(ps) && PyList_Check(zs) && PyList_GET_SIZE(ps) == n && PyList_GET_SIZE(zs) == n) kind = 'C';
    }
    PyObject *p = PyTuple_GET_ITEM(rec, 1);
    if (!PyLong_Check(p)) return 0;
    long v = PyLong_AsLong(p);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return v == pos ? kind : 0;
}

typedef struct {
    PyObject *nodes, *owners, *tier, *bs, *cls, *kb, *out;
    PyObject *gone; /* keys of the removals ("x") after the run in this batch: looked up, not captured */
} run_t;

/* One stored block into the chain (grown at either end, as emitter._Chain; else the chain goes out
 * and a new one starts): 0, or -1 on an error (the chain then cleared). */
static int take(chain_t *c, PyObject *key, run_t *r, PyObject *cparent, PyObject *csize) {
    PyObject *parent = NULL, *kbytes = NULL;
    long long size = 0;
    Py_INCREF(key);
    int look = cparent == NULL;
    if (!look && r->gone != NULL) {
        look = PySet_Contains(r->gone, key);
        if (look < 0) goto fail;
    }
    PyObject *sz = NULL;
    if (look) {
        if (block(key, r->nodes, r->owners, &parent, &sz) < 0) goto fail;
    } else {
        parent = Py_NewRef(cparent);
        sz = Py_NewRef(csize);
    }
    size = PyLong_AsLongLong(sz);
    Py_DECREF(sz);
    if (size == -1 && PyErr_Occurred()) goto fail;
    if ((kbytes = as_bytes(key, r->kb)) == NULL) goto fail;
    int took = 0;
    if (c->back != NULL && parent != Py_None) { /* parent == last: grows at the end */
        took = PyObject_RichCompareBool(parent, c->last, Py_EQ);
        if (took < 0) goto fail;
        if (took) {
            if (PyList_Append(c->back, kbytes) < 0) goto fail;
            Py_SETREF(c->last, Py_NewRef(key));
        }
    }
    if (!took && c->back != NULL && c->top != Py_None) { /* key == top: grows at the front */
        took = PyObject_RichCompareBool(key, c->top, Py_EQ);
        if (took < 0) goto fail;
        if (took) {
            if (PyList_Append(c->front, kbytes) < 0) goto fail;
            Py_SETREF(c->top, Py_NewRef(parent));
        }
    }
    if (!took) {
        if (c->back != NULL && chain_emit(c, r->tier, r->bs, r->cls, r->kb, r->out) < 0) goto fail;
        chain_clear(c);
        c->front = PyList_New(0);
        c->back = PyList_New(0);
        if (!c->front || !c->back || PyList_Append(c->back, kbytes) < 0) goto fail;
        c->top = Py_NewRef(parent);
        c->last = Py_NewRef(key);
    }
    c->size += size;
    Py_DECREF(kbytes);
    Py_DECREF(parent);
    Py_DECREF(key);
    return 0;
fail:
    Py_XDECREF(kbytes);
    Py_XDECREF(parent);
    Py_DECREF(key);
    chain_clear(c);
    return -1;
}

/* The keys of the "x" and "X" records from records[i] on (a set), or NULL with no error when there are none. */
static PyObject *gone_after(PyObject *records, Py_ssize_t i) {
    PyObject *gone = NULL;
    for (; i < PyList_GET_SIZE(records); i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        if (!PyTuple_Check(rec) || PyTuple_GET_SIZE(rec) < 3) continue;
        PyObject *k = PyTuple_GET_ITEM(rec, 0);
        if (!PyUnicode_Check(k)) continue;
        int one = PyUnicode_CompareWithASCIIString(k, "x") == 0;
        PyObject *many = PyTuple_GET_ITEM(rec, 2); /* "X": a run of removals, a list of keys */
        if (!one && (PyUnicode_CompareWithASCIIString(k, "X") != 0 || !PyList_Check(many))) continue;
        if (gone == NULL && (gone = PySet_New(NULL)) == NULL) return NULL;
        Py_ssize_t m = one ? 1 : PyList_GET_SIZE(many);
        for (Py_ssize_t j = 0; j < m; j++) {
            if (PySet_Add(gone, one ? many : PyList_GET_ITEM(many, j)) < 0) {
                Py_DECREF(gone);
                return NULL;
            }
        }
    }
    return gone;
}

static int take_run(chain_t *c, PyObject *rec, int kind, run_t *r) {
    PyObject *keys = PyTuple_GET_ITEM(rec, 2), *ps = kind == 'C' ? PyTuple_GET_ITEM(rec, 3) : NULL;
    PyObject *zs = kind == 'C' ? PyTuple_GET_ITEM(rec, 4) : NULL;
    int rc = 0;
    Py_INCREF(rec);
    for (Py_ssize_t j = 0; rc == 0 && j < PyList_GET_SIZE(keys); j++) {
        if (ps != NULL && (j >= PyList_GET_SIZE(ps) || j >= PyList_GET_SIZE(zs))) ps = zs = NULL;
        rc = take(c, PyList_GET_ITEM(keys, j), r, ps ? PyList_GET_ITEM(ps, j) : NULL, zs ? PyList_GET_ITEM(zs, j) : NULL);
    }
    Py_DECREF(rec);
    return rc;
}

/* A "k" record: its keys cut from the joined bytes, each one's parent the key before it (the
 * first's the record's), one size each. The keys are read in order from one buffer, not by a
 * pointer each from the engine thread's objects. */
static int take_chain(chain_t *c, PyObject *rec, run_t *r) {
    PyObject *blob = PyTuple_GET_ITEM(rec, 2), *size = PyTuple_GET_ITEM(rec, 5);
    Py_ssize_t w = PyLong_AsSsize_t(PyTuple_GET_ITEM(rec, 3)), n = PyBytes_GET_SIZE(blob) / w;
    PyObject *parent = Py_NewRef(PyTuple_GET_ITEM(rec, 4));
    int rc = 0;
    Py_INCREF(rec);
    for (Py_ssize_t j = 0; rc == 0 && j < n; j++) {
        PyObject *key = PyBytes_FromStringAndSize(PyBytes_AS_STRING(blob) + j * w, w);
        if (key == NULL) {
            rc = -1;
            break;
        }
        rc = take(c, key, r, parent, size);
        Py_SETREF(parent, key);
    }
    Py_DECREF(parent);
    Py_DECREF(rec);
    return rc;
}

PyObject *ctxcache_stored_run(PyObject *self, PyObject *args) {
    PyObject *records;
    Py_ssize_t i;
    long pos;
    run_t r = {.gone = NULL};
    int looked = 0; /* r.gone computed (on the first captured run) */
    if (!PyArg_ParseTuple(args, "O!nlO!O!UOOOO!", &PyList_Type, &records, &i, &pos, &PyList_Type, &r.nodes,
                          &PyList_Type, &r.owners, &r.tier, &r.bs, &r.cls, &r.kb, &PyList_Type, &r.out))
        return NULL;
    if (s_a == NULL) {
        s_a = PyUnicode_InternFromString("a");
        s_c = PyUnicode_InternFromString("c");
        s_k = PyUnicode_InternFromString("k");
        s_parent = PyUnicode_InternFromString("parent");
        s_depth = PyUnicode_InternFromString("depth");
        if (!s_a || !s_c || !s_k || !s_parent || !s_depth) return NULL;
    }
    chain_t c = {NULL, NULL, NULL, NULL, 0};
    while (i < PyList_GET_SIZE(records)) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        int kind = kind_of(rec, pos);
        if (!kind) break;
        i++;
        if ((kind == 'C' || kind == 'k') && !looked) {
            looked = 1;
            r.gone = gone_after(records, i);
            if (r.gone == NULL && PyErr_Occurred()) goto fail;
        }
        int rc = kind == 'a'   ? take(&c, PyTuple_GET_ITEM(rec, 2), &r, NULL, NULL)
                 : kind == 'k' ? take_chain(&c, rec, &r)
                               : take_run(&c, rec, kind, &r);
        if (rc < 0) goto fail;
    }
    if (c.back != NULL && chain_emit(&c, r.tier, r.bs, r.cls, r.kb, r.out) < 0) goto fail;
    chain_clear(&c);
    Py_XDECREF(r.gone);
    return PyLong_FromSsize_t(i);
fail:
    chain_clear(&c);
    Py_XDECREF(r.gone);
    return NULL;
}

/* run_meta(keys, nodes, owners) -> (parents, sizes): what stored_run would look up for each key now,
 * read by the engine thread as a store's run closes (EngineWatch._close), while the index's and the
 * owners' entries are in its cache; on the emitter's thread, ~1 µs a block was cache misses. */
PyObject *ctxcache_run_meta(PyObject *self, PyObject *args) {
    PyObject *keys, *nodes, *owners;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &keys, &PyList_Type, &nodes, &PyList_Type, &owners)) return NULL;
    if (s_parent == NULL) {
        s_parent = PyUnicode_InternFromString("parent");
        s_depth = PyUnicode_InternFromString("depth");
        if (!s_parent || !s_depth) return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *ps = PyList_New(n), *zs = PyList_New(n);
    if (ps == NULL || zs == NULL) goto fail;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *parent = NULL, *size = NULL;
        if (block(PyList_GET_ITEM(keys, j), nodes, owners, &parent, &size) < 0) goto fail;
        PyList_SET_ITEM(ps, j, parent);
        PyList_SET_ITEM(zs, j, size);
    }
    return Py_BuildValue("(NN)", ps, zs);
fail:
    Py_XDECREF(ps);
    Py_XDECREF(zs);
    return NULL;
}
