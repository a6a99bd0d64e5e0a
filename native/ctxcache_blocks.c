/* ctxcache._native.BlockTable, storage: every cached block's key, token bytes and node fields
 * without a Python object per block (issue 30: <= 200 B of RSS per block at 10 M blocks; docs/
 * ARCHITECTURE.md, "The compiled block table"). ctxcache_blocks_py.c is the Python type over it.
 *
 * Records (32 B), keys and token bytes sit in pages of 2**page_bits slots that never move, so the
 * table grows without copying what it holds and a slot id stays valid until its block is removed;
 * freed slots go on a free list (LIFO). The key -> slot map is ctxcache_order.c's: 1,024 open-
 * addressing tables picked by the top bits of the key's hash, each doubling on its own at 3/4 full
 * (no insert rehashes more than ~1/1,024 of the keys), linear probing, deletion by backward shift.
 * A cell holds 32 bits of the hash (a filter before the memcmp of the key) and slot + 1; keys are
 * compared as raw bytes, so no Python code ever runs inside the map. The LRU order is a doubly
 * linked list through the records' prev/next (front: the next victim).
 *
 * A root's parent key (the namespace root the index names a depth-0 block's parent by) is not a
 * block: the few distinct ones are kept once each, refcounted, in root_ids/root_keys.
 */
#include "ctxcache_blocks.h"

#include <string.h>

#define XXH_INLINE_ALL
#include "xxhash.h"

/* XXH3 over the whole key, not its first bytes: a table of any key width, and keys that are not
 * hashes (tests, hostile callers) still spread over the shards. */
uint64_t bt_hash(const BlockTable *t, const char *key) { return XXH3_64bits(key, t->key_width); }

/* The slot holding ``key`` (hash h), or BT_NIL; *sh is its shard, *cell (if asked) its cell. */
uint32_t bt_find(const BlockTable *t, const char *key, uint64_t h, BShard **sh, uint32_t *cell) {
    BShard *s = (BShard *)&t->shards[h >> (64 - BT_SHARD_BITS)];
    *sh = s;
    if (s->cells == NULL) return BT_NIL;
    uint32_t lo = (uint32_t)h, i = lo & s->mask;
    for (;;) {
        uint64_t c = s->cells[i];
        if (c == 0) return BT_NIL;
        if ((uint32_t)(c >> 32) == lo && memcmp(bt_key(t, (uint32_t)c - 1), key, t->key_width) == 0) {
            if (cell != NULL) *cell = i;
            return (uint32_t)c - 1;
        }
        i = (i + 1) & s->mask;
    }
}

/* A slot for a new block (the last freed first, else the next never used), or BT_NIL with
 * MemoryError set. */
static uint32_t alloc_slot(BlockTable *t) {
    if (t->free != BT_NIL) {
        uint32_t s = t->free;
        t->free = bt_rec(t, s)->next;
        return s;
    }
    if (t->used >= BT_MAX_SLOTS) {
        PyErr_SetString(PyExc_MemoryError, "BlockTable is full (2**31 - 1 blocks)");
        return BT_NIL;
    }
    if ((t->used >> t->page_bits) == t->npages) {
        if (t->npages == t->pages_cap) {
            uint32_t cap = t->pages_cap ? t->pages_cap * 2 : 8;
            char **pages = PyMem_Realloc(t->pages, cap * sizeof(char *));
            if (pages == NULL) return PyErr_NoMemory(), BT_NIL;
            t->pages = pages;
            t->pages_cap = cap;
        }
        char *page = PyMem_Malloc(t->page_bytes);
        if (page == NULL) return PyErr_NoMemory(), BT_NIL;
        t->pages[t->npages++] = page;
    }
    return t->used++;
}

static void lru_unlink(BlockTable *t, uint32_t s) {
    BRec *r = bt_rec(t, s);
    if (r->prev != BT_NIL) bt_rec(t, r->prev)->next = r->next;
    else t->head = r->next;
    if (r->next != BT_NIL) bt_rec(t, r->next)->prev = r->prev;
    else t->tail = r->prev;
}

static void lru_link_back(BlockTable *t, uint32_t s) {
    BRec *r = bt_rec(t, s);
    r->prev = t->tail;
    r->next = BT_NIL;
    if (t->tail != BT_NIL) bt_rec(t, t->tail)->next = s;
    else t->head = s;
    t->tail = s;
}

void bt_lru_back(BlockTable *t, uint32_t s) {
    if (s == t->tail) return;
    lru_unlink(t, s);
    lru_link_back(t, s);
}

/* Store a new block (its key absent from shard sh; parent a live slot, a held root id or BT_NIL):
 * the slot, or BT_NIL with MemoryError set and nothing changed. */
uint32_t bt_add(BlockTable *t, BShard *sh, uint64_t h, const char *key, uint32_t parent, const char *tokens,
                uint32_t depth, uint32_t tag) {
    uint64_t cap = sh->cells ? (uint64_t)sh->mask + 1 : 0;
    if (((uint64_t)sh->count + 1) * 4 > cap * 3 && cell_grow(sh) < 0) return PyErr_NoMemory(), BT_NIL;
    uint32_t s = alloc_slot(t);
    if (s == BT_NIL) return BT_NIL;
    BRec *r = bt_rec(t, s);
    *r = (BRec){.parent = parent, .depth = depth, .tag = tag, .live = 1};
    memcpy(bt_key(t, s), key, t->key_width);
    memcpy(bt_tokens(t, s), tokens, t->token_bytes);
    lru_link_back(t, s);
    cell_put(sh, (uint64_t)(uint32_t)h << 32 | ((uint64_t)s + 1));
    sh->count++;
    t->n++;
    if (parent < BT_ROOT) bt_rec(t, parent)->children++;
    return s;
}

/* Remove the block in cell ``cell`` of sh (the caller checked it has no children and no pins). */
void bt_drop(BlockTable *t, BShard *sh, uint32_t cell) {
    uint32_t s = (uint32_t)sh->cells[cell] - 1;
    BRec *r = bt_rec(t, s);
    lru_unlink(t, s);
    cell_del(sh, cell);
    if (r->parent < BT_ROOT) bt_rec(t, r->parent)->children--;
    else if (r->parent != BT_NIL) bt_root_release(t, r->parent & ~BT_ROOT);
    r->live = 0;
    r->next = t->free;
    t->free = s;
    t->n--;
}

/* Take a reference to the root key ``key`` (kept once however many roots name it): its id in *id,
 * 0; or -1 with an exception set and nothing changed. */
int bt_root_acquire(BlockTable *t, const char *key, uint32_t *id) {
    PyObject *k = PyBytes_FromStringAndSize(key, t->key_width); /* exact bytes: no __eq__ runs */
    if (k == NULL) return -1;
    PyObject *v = PyDict_GetItemWithError(t->root_ids, k);
    if (v != NULL) {
        *id = (uint32_t)PyLong_AsUnsignedLong(v);
        t->root_refs[*id]++;
        Py_DECREF(k);
        return 0;
    }
    if (PyErr_Occurred()) goto fail;
    uint32_t i;
    if (t->nroot_free) {
        i = t->root_free[t->nroot_free - 1];
    } else {
        i = (uint32_t)PyList_GET_SIZE(t->root_keys);
        if (i == t->root_cap) { /* ids below root_cap: the free stack never outgrows it either */
            uint32_t cap = t->root_cap ? t->root_cap * 2 : 8;
            uint32_t *refs = PyMem_Realloc(t->root_refs, cap * sizeof(uint32_t));
            if (refs == NULL) goto nomem;
            t->root_refs = refs;
            uint32_t *fr = PyMem_Realloc(t->root_free, cap * sizeof(uint32_t));
            if (fr == NULL) goto nomem;
            t->root_free = fr;
            t->root_cap = cap;
        }
    }
    PyObject *iv = PyLong_FromUnsignedLong(i);
    if (iv == NULL) goto fail;
    int err = PyDict_SetItem(t->root_ids, k, iv);
    Py_DECREF(iv);
    if (err < 0) goto fail;
    if (t->nroot_free) {
        t->nroot_free--;
        PyList_SET_ITEM(t->root_keys, i, k); /* steals k; the slot held None */
        Py_DECREF(Py_None);
    } else if (PyList_Append(t->root_keys, k) < 0) {
        PyDict_DelItem(t->root_ids, k);
        goto fail;
    } else {
        Py_DECREF(k);
    }
    t->root_refs[i] = 1;
    *id = i;
    return 0;
nomem:
    PyErr_NoMemory();
fail:
    Py_DECREF(k);
    return -1;
}

void bt_root_release(BlockTable *t, uint32_t id) {
    if (--t->root_refs[id]) return;
    PyObject *k = PyList_GET_ITEM(t->root_keys, id);
    /* Deleting a present exact-bytes key neither runs Python code nor allocates. */
    if (PyDict_DelItem(t->root_ids, k) < 0) PyErr_WriteUnraisable((PyObject *)t);
    PyList_SET_ITEM(t->root_keys, id, Py_NewRef(Py_None));
    Py_DECREF(k);
    t->root_free[t->nroot_free++] = id;
}

void bt_free_all(BlockTable *t) {
    for (uint32_t p = 0; p < t->npages; p++) PyMem_Free(t->pages[p]);
    PyMem_Free(t->pages);
    for (uint32_t i = 0; i < BT_SHARDS; i++) PyMem_Free(t->shards[i].cells);
    PyMem_Free(t->root_refs);
    PyMem_Free(t->root_free);
    Py_CLEAR(t->root_ids);
    Py_CLEAR(t->root_keys);
}

/* What the table allocated itself (the root keys' dict and list not counted: a few per namespace). */
size_t bt_own_bytes(const BlockTable *t) {
    size_t b = sizeof(BlockTable) + t->pages_cap * sizeof(char *) + (size_t)t->npages * t->page_bytes;
    for (uint32_t i = 0; i < BT_SHARDS; i++)
        if (t->shards[i].cells) b += ((size_t)t->shards[i].mask + 1) * sizeof(uint64_t);
    return b + (size_t)t->root_cap * 2 * sizeof(uint32_t);
}
