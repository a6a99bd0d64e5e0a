/* ctxcache._native.BlockTable, the Python type over ctxcache_blocks.c's storage.
 *
 * Every entry point parses and checks all its arguments (an int through __index__, which may run
 * Python code) before it reads the table, so a callback cannot change the table under a call, and
 * no Python code runs once it does (keys are compared as raw bytes). Errors, as the pure-Python
 * reference src/ctxcache/blocktable.py raises them (tests/test_blocktable.py compares the two):
 * TypeError for a wrong type; ValueError for a wrong width or a value out of range, and for a
 * block that may not leave (children or pins) or an unpin below zero; KeyError for an absent or
 * duplicate key; IndexError for a slot that is not a live block; BufferError for a strided buffer.
 */
#include "ctxcache_blocks.h"

#include <string.h>
#include <structmember.h>

/* ``o`` as an int (operator.index) in [0, max]; ValueError outside. */
static int uint_arg(PyObject *o, unsigned long long max, const char *what, unsigned long long *out) {
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v < 0 || (unsigned long long)v > max) {
        PyErr_Format(PyExc_ValueError, "%s must be in [0, %llu]", what, max);
        return -1;
    }
    *out = (unsigned long long)v;
    return 0;
}

/* ``o`` as a slot number: any int; whether it names a live block is live() 's to say. */
static int slot_arg(PyObject *o, long long *out) {
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) return -1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (*out == -1 && PyErr_Occurred()) return -1;
    if (overflow) *out = -1;
    return 0;
}

static BRec *live(BlockTable *t, long long s, PyObject *o) {
    if (s < 0 || s >= (long long)t->used || !bt_rec(t, (uint32_t)s)->live) {
        PyErr_Format(PyExc_IndexError, "slot %R is not a block of this table", o);
        return NULL;
    }
    return bt_rec(t, (uint32_t)s);
}

/* The bytes of a key of this table's width, or NULL with TypeError/ValueError. */
static const char *key_arg(BlockTable *t, PyObject *o, const char *what) {
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes, not %.100s", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    if (PyBytes_GET_SIZE(o) != (Py_ssize_t)t->key_width) {
        PyErr_Format(PyExc_ValueError, "%s must be %u bytes, not %zd", what, t->key_width, PyBytes_GET_SIZE(o));
        return NULL;
    }
    return PyBytes_AS_STRING(o);
}

/* Any C-contiguous buffer (bytes, bytearray, memoryview, numpy array), read as its raw bytes. */
static int tokens_arg(PyObject *o, Py_buffer *view) {
    if (PyObject_GetBuffer(o, view, PyBUF_FULL_RO) < 0) return -1;
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_BufferError, "tokens must be a C-contiguous buffer");
        return -1;
    }
    return 0;
}

static PyObject *bt_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"key_width", "token_bytes", NULL};
    PyObject *kwo = NULL, *tbo = NULL;
    unsigned long long kwidth = 16, tb = 64;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:BlockTable", kwlist, &kwo, &tbo)) return NULL;
    if ((kwo && uint_arg(kwo, 256, "key_width", &kwidth) < 0) || (tbo && uint_arg(tbo, 1 << 20, "token_bytes", &tb) < 0))
        return NULL;
    if (kwidth == 0 || tb == 0) return PyErr_Format(PyExc_ValueError, "key_width and token_bytes must be positive");
    BlockTable *t = (BlockTable *)type->tp_alloc(type, 0); /* zeroed: every shard empty */
    if (t == NULL) return NULL;
    t->head = t->tail = t->free = BT_NIL;
    t->key_width = (uint32_t)kwidth;
    t->token_bytes = (uint32_t)tb;
    size_t per = sizeof(BRec) + kwidth + tb;
    t->page_bits = 14; /* pages of ~2 MiB or less: 16,384 slots at 16 + 64 bytes */
    while (t->page_bits > 4 && (per << t->page_bits) > (2u << 20)) t->page_bits--;
    t->key_off = sizeof(BRec) << t->page_bits;
    t->tok_off = t->key_off + ((size_t)kwidth << t->page_bits);
    t->page_bytes = per << t->page_bits;
    t->root_ids = PyDict_New();
    t->root_keys = PyList_New(0);
    if (t->root_ids == NULL || t->root_keys == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void bt_dealloc(BlockTable *t) {
    bt_free_all(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *insert(BlockTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 4 || nargs > 5)
        return PyErr_Format(PyExc_TypeError, "insert() takes 4 or 5 arguments (%zd given)", nargs);
    unsigned long long depth, tag = 0;
    if (uint_arg(args[3], UINT32_MAX, "depth", &depth) < 0) return NULL;
    if (nargs == 5 && uint_arg(args[4], UINT32_MAX, "tag", &tag) < 0) return NULL;
    const char *key = key_arg(t, args[0], "key"), *pkey = NULL;
    if (key == NULL) return NULL;
    if (args[1] != Py_None && (pkey = key_arg(t, args[1], "parent")) == NULL) return NULL;
    if (depth > 0 && pkey == NULL) return PyErr_Format(PyExc_ValueError, "a block of depth > 0 needs its parent's key");
    Py_buffer view;
    if (tokens_arg(args[2], &view) < 0) return NULL;
    PyObject *out = NULL;
    if (view.len != (Py_ssize_t)t->token_bytes) {
        PyErr_Format(PyExc_ValueError, "tokens must be %u bytes, not %zd", t->token_bytes, view.len);
        goto done;
    }
    uint64_t h = bt_hash(t, key);
    BShard *sh, *psh;
    if (bt_find(t, key, h, &sh, NULL) != BT_NIL) {
        PyErr_SetString(PyExc_KeyError, "block already indexed");
        goto done;
    }
    uint32_t parent = BT_NIL, root = 0;
    if (depth > 0) {
        if ((parent = bt_find(t, pkey, bt_hash(t, pkey), &psh, NULL)) == BT_NIL) {
            PyErr_SetString(PyExc_KeyError, "parent block is not indexed: a chain is inserted from its root");
            goto done;
        }
    } else if (pkey != NULL) {
        if (bt_root_acquire(t, pkey, &root) < 0) goto done;
        parent = BT_ROOT | root;
    }
    uint32_t s = bt_add(t, sh, h, key, parent, view.buf, (uint32_t)depth, (uint32_t)tag);
    if (s == BT_NIL) {
        if (depth == 0 && pkey != NULL) bt_root_release(t, root);
    } else {
        out = PyLong_FromUnsignedLong(s);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

static PyObject *get(BlockTable *t, PyObject *key) {
    const char *k = key_arg(t, key, "key");
    if (k == NULL) return NULL;
    BShard *sh;
    uint32_t s = bt_find(t, k, bt_hash(t, k), &sh, NULL);
    return s == BT_NIL ? PyLong_FromLong(-1) : PyLong_FromUnsignedLong(s);
}

static int contains(BlockTable *t, PyObject *key) {
    const char *k = key_arg(t, key, "key");
    if (k == NULL) return -1;
    BShard *sh;
    return bt_find(t, k, bt_hash(t, k), &sh, NULL) != BT_NIL;
}

static PyObject *remove_(BlockTable *t, PyObject *key) {
    const char *k = key_arg(t, key, "key");
    if (k == NULL) return NULL;
    BShard *sh;
    uint32_t cell, s = bt_find(t, k, bt_hash(t, k), &sh, &cell);
    if (s == BT_NIL) return PyErr_Format(PyExc_KeyError, "block not indexed");
    BRec *r = bt_rec(t, s);
    if (r->children || r->pins)
        return PyErr_Format(PyExc_ValueError, "cannot remove slot %u (children=%u, pins=%u): only unpinned leaves leave",
                            s, r->children, r->pins);
    bt_drop(t, sh, cell);
    Py_RETURN_NONE;
}

static PyObject *match(BlockTable *t, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"", "", "touch", "slots", NULL};
    PyObject *keys, *tokens, *slots = Py_None;
    int touch = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$pO:match", kwlist, &keys, &tokens, &touch, &slots)) return NULL;
    if (slots != Py_None && !PyList_Check(slots))
        return PyErr_Format(PyExc_TypeError, "slots must be a list or None, not %.100s", Py_TYPE(slots)->tp_name);
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence of bytes");
    if (seq == NULL) return NULL;
    Py_buffer view;
    if (tokens_arg(tokens, &view) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq), *out = NULL;
    if (n > view.len / (Py_ssize_t)t->token_bytes) {
        PyErr_Format(PyExc_ValueError, "%zd keys need %zd token bytes, the buffer has %zd", n,
                     n * (Py_ssize_t)t->token_bytes, view.len);
        goto done;
    }
    for (; i < n; i++) { /* a key past the first miss is not read, so not checked either */
        const char *k = key_arg(t, items[i], "key"), *data = (const char *)view.buf + i * (Py_ssize_t)t->token_bytes;
        if (k == NULL) goto done;
        BShard *sh;
        uint32_t s = bt_find(t, k, bt_hash(t, k), &sh, NULL);
        if (s == BT_NIL || memcmp(bt_tokens(t, s), data, t->token_bytes) != 0) break; /* a collision is a miss */
        if (touch) bt_lru_back(t, s);
        if (slots != Py_None) {
            PyObject *v = PyLong_FromUnsignedLong(s);
            int err = v == NULL ? -1 : PyList_Append(slots, v);
            Py_XDECREF(v);
            if (err < 0) goto done;
        }
    }
    out = PyLong_FromSsize_t(i);
done:
    PyBuffer_Release(&view);
    Py_DECREF(seq);
    return out;
}

#define SLOT_OR_NULL(r, o)                                  \
    long long s_;                                           \
    if (slot_arg((o), &s_) < 0) return NULL;                \
    BRec *r = live(t, s_, (o));                                  \
    if (r == NULL) return NULL

static PyObject *key(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    (void)r;
    return PyBytes_FromStringAndSize(bt_key(t, (uint32_t)s_), t->key_width);
}

static PyObject *tokens_(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    (void)r;
    return PyBytes_FromStringAndSize(bt_tokens(t, (uint32_t)s_), t->token_bytes);
}

static PyObject *parent(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    return r->parent < BT_ROOT ? PyLong_FromUnsignedLong(r->parent) : PyLong_FromLong(-1);
}

static PyObject *parent_key(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    if (r->parent < BT_ROOT) return PyBytes_FromStringAndSize(bt_key(t, r->parent), t->key_width);
    if (r->parent == BT_NIL) Py_RETURN_NONE;
    return Py_NewRef(PyList_GET_ITEM(t->root_keys, r->parent & ~BT_ROOT));
}

#define FIELD(name)                                         \
    static PyObject *name(BlockTable *t, PyObject *o) {     \
        SLOT_OR_NULL(r, o);                                 \
        return PyLong_FromUnsignedLong(r->name);            \
    }
FIELD(depth)
FIELD(children)
FIELD(pins)
FIELD(tier)
FIELD(tag)

static PyObject *set_tier(BlockTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "set_tier() takes 2 arguments (%zd given)", nargs);
    long long s;
    unsigned long long tier;
    if (slot_arg(args[0], &s) < 0 || uint_arg(args[1], 255, "tier", &tier) < 0) return NULL;
    BRec *r = live(t, s, args[0]);
    if (r == NULL) return NULL;
    r->tier = (uint8_t)tier;
    Py_RETURN_NONE;
}

static PyObject *pin(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    if (r->pins == UINT32_MAX) return PyErr_Format(PyExc_ValueError, "slot %lld is pinned 2**32 - 1 times", s_);
    return PyLong_FromUnsignedLong(++r->pins);
}

static PyObject *unpin(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    if (r->pins == 0) return PyErr_Format(PyExc_ValueError, "unpin of slot %lld, which is not pinned", s_);
    return PyLong_FromUnsignedLong(--r->pins);
}

static PyObject *lru_touch(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    (void)r;
    bt_lru_back(t, (uint32_t)s_);
    Py_RETURN_NONE;
}

static PyObject *lru_front(BlockTable *t, PyObject *unused) {
    return t->head == BT_NIL ? PyLong_FromLong(-1) : PyLong_FromUnsignedLong(t->head);
}

static PyObject *lru_next(BlockTable *t, PyObject *o) {
    SLOT_OR_NULL(r, o);
    return r->next == BT_NIL ? PyLong_FromLong(-1) : PyLong_FromUnsignedLong(r->next);
}

static PyObject *memory_bytes(BlockTable *t, PyObject *unused) { return PyLong_FromSize_t(bt_own_bytes(t)); }

static Py_ssize_t bt_len(BlockTable *t) { return t->n; }

static PyMethodDef bt_methods[] = {
    {"insert", (PyCFunction)(void (*)(void))insert, METH_FASTCALL,
     "insert(key, parent, tokens, depth, tag=0) -> slot. A root (depth 0) keeps parent (bytes or None) as "
     "its parent key; a deeper block's parent must be indexed (its children count goes up). KeyError if "
     "the key is indexed or the parent is not."},
    {"get", (PyCFunction)get, METH_O, "get(key) -> the block's slot, or -1."},
    {"remove", (PyCFunction)remove_, METH_O,
     "remove(key): an unpinned leaf leaves (ValueError otherwise); its parent loses a child, its slot is freed."},
    {"match", (PyCFunction)(void (*)(void))match, METH_VARARGS | METH_KEYWORDS,
     "match(keys, tokens, *, touch=False, slots=None) -> how many leading keys are indexed with stored "
     "tokens equal to their token_bytes slice of tokens (a key collision is a miss). touch: move each "
     "match to the LRU back; slots: a list the matched slots are appended to."},
    {"key", (PyCFunction)key, METH_O, "key(slot) -> the block's key."},
    {"tokens", (PyCFunction)tokens_, METH_O, "tokens(slot) -> the block's token bytes."},
    {"parent", (PyCFunction)parent, METH_O, "parent(slot) -> the parent block's slot, or -1 for a root."},
    {"parent_key", (PyCFunction)parent_key, METH_O, "parent_key(slot) -> the parent's key (a root's as inserted, or None)."},
    {"depth", (PyCFunction)depth, METH_O, "depth(slot) -> int"},
    {"children", (PyCFunction)children, METH_O, "children(slot) -> indexed blocks whose parent it is"},
    {"pins", (PyCFunction)pins, METH_O, "pins(slot) -> its pin count"},
    {"tier", (PyCFunction)tier, METH_O, "tier(slot) -> the tier index holding its payload (0 at insert)"},
    {"tag", (PyCFunction)tag, METH_O, "tag(slot) -> the int tag given at insert"},
    {"set_tier", (PyCFunction)(void (*)(void))set_tier, METH_FASTCALL, "set_tier(slot, tier): 0 <= tier <= 255"},
    {"pin", (PyCFunction)pin, METH_O, "pin(slot) -> the new pin count"},
    {"unpin", (PyCFunction)unpin, METH_O, "unpin(slot) -> the new pin count (ValueError at 0)"},
    {"lru_touch", (PyCFunction)lru_touch, METH_O, "lru_touch(slot): move it to the LRU back (inserts go there too)."},
    {"lru_front", (PyCFunction)lru_front, METH_NOARGS, "lru_front() -> the least recently used slot, or -1 (pins not checked)."},
    {"lru_next", (PyCFunction)lru_next, METH_O, "lru_next(slot) -> the slot after it toward the back, or -1."},
    {"memory_bytes", (PyCFunction)memory_bytes, METH_NOARGS, "memory_bytes() -> bytes the table allocated (pages, map)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef bt_members[] = {
    {"key_width", T_UINT, offsetof(BlockTable, key_width), READONLY, "bytes per key"},
    {"token_bytes", T_UINT, offsetof(BlockTable, token_bytes), READONLY, "token bytes per block"},
    {"slots_used", T_UINT, offsetof(BlockTable, used), READONLY, "slots ever handed out: every slot is below it"},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods bt_seq = {.sq_length = (lenfunc)bt_len, .sq_contains = (objobjproc)contains};

static PyTypeObject BlockTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ctxcache._native.BlockTable",
    .tp_basicsize = sizeof(BlockTable),
    .tp_dealloc = (destructor)bt_dealloc,
    .tp_as_sequence = &bt_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BlockTable(key_width=16, token_bytes=64): blocks' keys, token bytes and node fields by slot, "
              "with a key -> slot map and an LRU list (docs/ARCHITECTURE.md, \"The compiled block table\").",
    .tp_methods = bt_methods,
    .tp_members = bt_members,
    .tp_new = bt_new,
};

int ctxcache_add_blocks(PyObject *m) {
    if (PyType_Ready(&BlockTableType) < 0) return -1;
    Py_INCREF(&BlockTableType);
    if (PyModule_AddObject(m, "BlockTable", (PyObject *)&BlockTableType) < 0) {
        Py_DECREF(&BlockTableType);
        return -1;
    }
    return 0;
}
