/* ctxcache._native.Order: the LRU/FIFO order of src/ctxcache/policies/base.py (OrderedPolicy) in C.
 *
 * One global order of keys, victim at the front, kept as a doubly linked list over slot ids:
 * a slot holds the key (a strong reference), its Python hash and its prev/next links; slots live in
 * pages of PAGE entries that never move, so the order grows without copying what it holds. The
 * key -> slot map is open addressing (linear probing, deletion by backward shift, no tombstones)
 * split into SHARDS tables by the top bits of the mixed hash: a table doubles on its own, so no
 * insert rehashes more than ~1/SHARDS of the keys (no O(n) pause at 10 M keys). A cell is 64 bits:
 * the low 32 bits of the mixed hash (its home and a filter before the key compare) and slot + 1.
 *
 * Semantics are OrderedPolicy's (tests/policies/test_sharded_order.py's OrderedDict reference):
 * on_insert of a resident key keeps its place; on_hit moves the key to the back when ``move_on_hit``
 * (LRU), else does nothing (FIFO); evict(can_evict) gives a refused key a second chance (to the
 * back), at most len() tries. ``can_evict`` is Python code: a call that changes the order under the
 * search raises RuntimeError (nothing in ctxcache does; a version counter notices).
 *
 * Keys are hashable values (bytes, ints): the instance is not tracked by the cyclic GC, so a full
 * collection never reads the order (the Python order's dicts hold no containers either).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ctxcache_cells.h"
#include <stdint.h>
#include <string.h>

#define PAGE_BITS 14
#define PAGE (1u << PAGE_BITS)
#define SHARD_BITS 10
#define SHARDS (1u << SHARD_BITS)
#define NIL UINT32_MAX

typedef struct {
    PyObject *key;
    Py_hash_t hash;
    uint32_t prev, next; /* a free slot: next is the next free one */
} Entry;

typedef CellShard Shard; /* ctxcache_cells.h; the hash is the mixed one */

typedef struct {
    PyObject_HEAD
    Entry **pages;
    uint32_t npages, pages_cap, used; /* slots handed out (free or live) */
    uint32_t head, tail, free, n;
    uint64_t version; /* bumped by every change of the order: callbacks must not change it */
    int move_on_hit;
    Shard shards[SHARDS];
} Order;

static inline Entry *E(Order *o, uint32_t s) { return &o->pages[s >> PAGE_BITS][s & (PAGE - 1)]; }

static inline uint64_t mix(Py_hash_t h) { /* splitmix64's finalizer: ints hash to themselves */
    uint64_t x = (uint64_t)h;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The cell index holding ``key`` in its shard, or -1 (not there) or -2 (an error in __eq__, or an
 * __eq__ that changed the order: its tables may have been reallocated under the probe). */
static Py_ssize_t find(Order *o, PyObject *key, Py_hash_t hash, Shard **sh_out) {
    uint64_t m = mix(hash);
    Shard *sh = &o->shards[m >> (64 - SHARD_BITS)];
    *sh_out = sh;
    if (sh->cells == NULL) return -1;
    uint32_t lo = (uint32_t)m, i = lo & sh->mask;
    for (;;) {
        uint64_t c = sh->cells[i];
        if (c == 0) return -1;
        if ((uint32_t)(c >> 32) == lo) {
            Entry *e = E(o, (uint32_t)c - 1);
            if (e->key == key) return i;
            if (e->hash == hash) { /* equal hashes, other objects: __eq__ may run Python code */
                uint64_t v = o->version;
                int eq = PyObject_RichCompareBool(e->key, key, Py_EQ);
                if (eq >= 0 && o->version != v) {
                    PyErr_SetString(PyExc_RuntimeError, "a key's __eq__ changed the LRU/FIFO order");
                    return -2;
                }
                if (eq < 0) return -2;
                if (eq) return i;
            }
        }
        i = (i + 1) & sh->mask;
    }
}

static uint32_t alloc_slot(Order *o) {
    if (o->free != NIL) {
        uint32_t s = o->free;
        o->free = E(o, s)->next;
        return s;
    }
    if (o->used == NIL - 1) return NIL;
    if ((o->used >> PAGE_BITS) == o->npages) {
        if (o->npages == o->pages_cap) {
            uint32_t cap = o->pages_cap ? o->pages_cap * 2 : 8;
            Entry **pages = PyMem_Realloc(o->pages, cap * sizeof(Entry *));
            if (pages == NULL) return NIL;
            o->pages = pages;
            o->pages_cap = cap;
        }
        Entry *page = PyMem_Malloc(PAGE * sizeof(Entry));
        if (page == NULL) return NIL;
        o->pages[o->npages++] = page;
    }
    return o->used++;
}

static void unlink_slot(Order *o, uint32_t s) {
    Entry *e = E(o, s);
    if (e->prev != NIL) E(o, e->prev)->next = e->next;
    else o->head = e->next;
    if (e->next != NIL) E(o, e->next)->prev = e->prev;
    else o->tail = e->prev;
}

static void link_back(Order *o, uint32_t s) {
    Entry *e = E(o, s);
    e->prev = o->tail;
    e->next = NIL;
    if (o->tail != NIL) E(o, o->tail)->next = s;
    else o->head = s;
    o->tail = s;
}

/* Forget the key in cell i of sh; returns the key (the reference the order held). */
static PyObject *drop(Order *o, Shard *sh, uint32_t i) {
    uint32_t s = (uint32_t)sh->cells[i] - 1;
    Entry *e = E(o, s);
    PyObject *key = e->key;
    unlink_slot(o, s);
    cell_del(sh, i);
    e->key = NULL;
    e->next = o->free;
    o->free = s;
    o->n--;
    o->version++;
    return key;
}

static PyObject *order_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Order *o = (Order *)type->tp_alloc(type, 0); /* zeroed: every shard empty */
    if (o == NULL) return NULL;
    o->head = o->tail = o->free = NIL;
    o->move_on_hit = 1;
    return (PyObject *)o;
}

static void order_dealloc(Order *o) {
    for (uint32_t s = o->head; s != NIL;) {
        Entry *e = E(o, s);
        s = e->next;
        Py_DECREF(e->key);
    }
    for (uint32_t p = 0; p < o->npages; p++) PyMem_Free(o->pages[p]);
    PyMem_Free(o->pages);
    for (uint32_t i = 0; i < SHARDS; i++) PyMem_Free(o->shards[i].cells);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int lookup(Order *o, PyObject *key, Py_hash_t *hash, Shard **sh, Py_ssize_t *i) {
    *hash = PyObject_Hash(key);
    if (*hash == -1 && PyErr_Occurred()) return -1;
    *i = find(o, key, *hash, sh);
    return *i == -2 ? -1 : 0;
}

static PyObject *on_insert(Order *o, PyObject *key) {
    Py_hash_t hash;
    Shard *sh;
    Py_ssize_t i;
    if (lookup(o, key, &hash, &sh, &i) < 0) return NULL;
    if (i >= 0) Py_RETURN_NONE; /* already resident: it keeps its place */
    if ((sh->count + 1) * 4 > (sh->cells ? sh->mask + 1 : 0) * 3 && cell_grow(sh) < 0) return PyErr_NoMemory();
    uint32_t s = alloc_slot(o);
    if (s == NIL) return PyErr_NoMemory();
    Entry *e = E(o, s);
    Py_INCREF(key);
    e->key = key;
    e->hash = hash;
    link_back(o, s);
    cell_put(sh, (uint64_t)(uint32_t)mix(hash) << 32 | ((uint64_t)s + 1));
    sh->count++;
    o->n++;
    o->version++;
    Py_RETURN_NONE;
}

static int hit_one(Order *o, PyObject *key) {
    Py_hash_t hash;
    Shard *sh;
    Py_ssize_t i;
    if (lookup(o, key, &hash, &sh, &i) < 0) return -1;
    if (i < 0) {
        PyObject *args = PyTuple_Pack(1, key); /* a tuple key is the one argument, as a dict raises it */
        if (args != NULL) {
            PyErr_SetObject(PyExc_KeyError, args);
            Py_DECREF(args);
        }
        return -1;
    }
    uint32_t s = (uint32_t)sh->cells[i] - 1;
    if (s != o->tail) {
        unlink_slot(o, s);
        link_back(o, s);
    }
    o->version++;
    return 0;
}

static PyObject *on_hit(Order *o, PyObject *key) {
    if (o->move_on_hit && hit_one(o, key) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *on_hits(Order *o, PyObject *keys) {
    if (PyList_CheckExact(keys) || PyTuple_CheckExact(keys)) {
        if (!o->move_on_hit) Py_RETURN_NONE;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(keys); j++) { /* a key's __eq__ may change the list */
            PyObject *key = Py_NewRef(PySequence_Fast_GET_ITEM(keys, j));
            int r = hit_one(o, key);
            Py_DECREF(key);
            if (r < 0) return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *it = PyObject_GetIter(keys), *key;
    if (it == NULL) return NULL;
    while ((key = PyIter_Next(it)) != NULL) {
        int r = o->move_on_hit ? hit_one(o, key) : 0;
        Py_DECREF(key);
        if (r < 0) break;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *on_remove(Order *o, PyObject *key) {
    Py_hash_t hash;
    Shard *sh;
    Py_ssize_t i;
    if (lookup(o, key, &hash, &sh, &i) < 0) return NULL;
    if (i >= 0) Py_DECREF(drop(o, sh, (uint32_t)i));
    Py_RETURN_NONE;
}

static int contains(Order *o, PyObject *key) {
    Py_hash_t hash;
    Shard *sh;
    Py_ssize_t i;
    if (lookup(o, key, &hash, &sh, &i) < 0) return -1;
    return i >= 0;
}

static PyObject *contains_meth(Order *o, PyObject *key) {
    int r = contains(o, key);
    if (r < 0) return NULL;
    return PyBool_FromLong(r);
}

static Py_ssize_t order_len(Order *o) { return o->n; }

/* can_evict(key) as 1/0, -1 on error; RuntimeError if the call changed the order. */
static int allowed(Order *o, PyObject *can_evict, PyObject *key) {
    if (can_evict == Py_None) return 1;
    uint64_t v = o->version;
    Py_INCREF(key);
    PyObject *r = PyObject_CallOneArg(can_evict, key);
    Py_DECREF(key);
    if (r == NULL) return -1;
    int ok = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (ok >= 0 && o->version != v) {
        PyErr_SetString(PyExc_RuntimeError, "can_evict changed the LRU/FIFO order during the search");
        return -1;
    }
    return ok;
}

static PyObject *evict(Order *o, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *can_evict = nargs > 0 ? args[0] : Py_None;
    if (nargs > 1) return PyErr_Format(PyExc_TypeError, "evict() takes at most 1 argument (%zd given)", nargs);
    /* A refused key is in use (a parent with children, or pinned): it goes to the back, like a
       second chance, so long-lived ancestors are skipped once per cycle, not per call. */
    for (uint32_t tries = o->n; tries > 0; tries--) {
        uint32_t s = o->head;
        Entry *e = E(o, s);
        int ok = allowed(o, can_evict, e->key);
        if (ok < 0) return NULL;
        if (ok) {
            Shard *sh;
            Py_ssize_t i = find(o, e->key, e->hash, &sh); /* found: the search left it in place */
            if (i < 0) return NULL;                       /* an error in a colliding key's __eq__ */
            return drop(o, sh, (uint32_t)i);
        }
        unlink_slot(o, s);
        link_back(o, s);
        o->version++;
    }
    Py_RETURN_NONE;
}

static PyObject *peek(Order *o, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *can_evict = nargs > 0 ? args[0] : Py_None;
    if (nargs > 1) return PyErr_Format(PyExc_TypeError, "peek() takes at most 1 argument (%zd given)", nargs);
    for (uint32_t s = o->head; s != NIL; s = E(o, s)->next) {
        int ok = allowed(o, can_evict, E(o, s)->key);
        if (ok < 0) return NULL;
        if (ok) return Py_NewRef(E(o, s)->key);
    }
    Py_RETURN_NONE;
}

static PyObject *keys(Order *o, PyObject *unused) {
    PyObject *out = PyList_New(o->n);
    if (out == NULL) return NULL;
    Py_ssize_t j = 0;
    for (uint32_t s = o->head; s != NIL; s = E(o, s)->next) PyList_SET_ITEM(out, j++, Py_NewRef(E(o, s)->key));
    return out;
}

static PyObject *get_move(Order *o, void *c) { return PyBool_FromLong(o->move_on_hit); }

static int set_move(Order *o, PyObject *v, void *c) {
    int t = v ? PyObject_IsTrue(v) : -1;
    if (t < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cannot delete move_on_hit");
        return -1;
    }
    o->move_on_hit = t;
    return 0;
}

static PyMethodDef order_methods[] = {
    {"on_insert", (PyCFunction)on_insert, METH_O, "A new key is now resident (a resident one keeps its place)."},
    {"on_hit", (PyCFunction)on_hit, METH_O, "LRU: the key moves to the back (KeyError if not resident); FIFO: nothing."},
    {"on_hits", (PyCFunction)on_hits, METH_O, "on_hit for each key in order (those before a KeyError stay moved)."},
    {"on_remove", (PyCFunction)on_remove, METH_O, "Forget the key if resident."},
    {"evict", (PyCFunction)(void (*)(void))evict, METH_FASTCALL, "evict(can_evict=None) -> key or None"},
    {"peek", (PyCFunction)(void (*)(void))peek, METH_FASTCALL, "peek(can_evict=None) -> key or None"},
    {"__contains__", (PyCFunction)contains_meth, METH_O | METH_COEXIST, "key in order"},
    {"order_keys", (PyCFunction)keys, METH_NOARGS, "The keys, front (next victim) first."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef order_getset[] = {
    {"move_on_hit", (getter)get_move, (setter)set_move, "True: LRU (a hit moves the key to the back); False: FIFO.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods order_seq = {.sq_length = (lenfunc)order_len, .sq_contains = (objobjproc)contains};

static PyTypeObject OrderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ctxcache._native.Order",
    .tp_basicsize = sizeof(Order),
    .tp_dealloc = (destructor)order_dealloc,
    .tp_as_sequence = &order_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The LRU/FIFO order (policies/base.py's OrderedPolicy), keys in a linked list over slot ids.",
    .tp_methods = order_methods,
    .tp_getset = order_getset,
    .tp_new = order_new,
};

int ctxcache_add_order(PyObject *m) {
    if (PyType_Ready(&OrderType) < 0) return -1;
    Py_INCREF(&OrderType);
    if (PyModule_AddObject(m, "Order", (PyObject *)&OrderType) < 0) {
        Py_DECREF(&OrderType);
        return -1;
    }
    return 0;
}
