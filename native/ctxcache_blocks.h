/* The block table's layout (ctxcache._native.BlockTable), shared by ctxcache_blocks.c (storage:
 * pages, the key -> slot map, the LRU list, root keys) and ctxcache_blocks_py.c (the Python type).
 * docs/ARCHITECTURE.md, "The compiled block table". */
#ifndef CTXCACHE_BLOCKS_H
#define CTXCACHE_BLOCKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ctxcache_cells.h"
#include <stdint.h>

#define BT_SHARD_BITS 10
#define BT_SHARDS (1u << BT_SHARD_BITS)
#define BT_NIL UINT32_MAX
/* A record's parent: a slot (< BT_ROOT), BT_ROOT | the id of its root key, or BT_NIL (a root
 * inserted without one). Slots and root ids stay below 2**31 - 1 so the three never meet. */
#define BT_ROOT 0x80000000u
#define BT_MAX_SLOTS 0x7fffffffu

typedef struct {
    uint32_t parent;
    uint32_t prev, next; /* the LRU list; a free slot: next is the next free one */
    uint32_t depth, children, pins, tag;
    uint8_t tier, live;
} BRec; /* 32 bytes: the key and tokens live in the page's arenas, not here */

typedef CellShard BShard; /* ctxcache_cells.h */

typedef struct {
    PyObject_HEAD
    /* A page: PAGE records, then PAGE keys, then PAGE token blocks; pages never move. */
    char **pages;
    uint32_t npages, pages_cap, used, free, head, tail, n;
    uint32_t key_width, token_bytes, page_bits;
    size_t key_off, tok_off, page_bytes;
    PyObject *root_ids;  /* dict: root key (exact bytes) -> its id; bytes and ints only, so no cycle */
    PyObject *root_keys; /* list: id -> root key, or None when the id is free */
    uint32_t *root_refs; /* id -> how many roots name it */
    uint32_t *root_free; /* ids to reuse, a stack */
    uint32_t root_cap, nroot_free;
    BShard shards[BT_SHARDS];
} BlockTable;

static inline BRec *bt_rec(const BlockTable *t, uint32_t s) {
    return (BRec *)t->pages[s >> t->page_bits] + (s & ((1u << t->page_bits) - 1));
}
static inline char *bt_key(const BlockTable *t, uint32_t s) {
    return t->pages[s >> t->page_bits] + t->key_off + (size_t)(s & ((1u << t->page_bits) - 1)) * t->key_width;
}
static inline char *bt_tokens(const BlockTable *t, uint32_t s) {
    return t->pages[s >> t->page_bits] + t->tok_off + (size_t)(s & ((1u << t->page_bits) - 1)) * t->token_bytes;
}

uint64_t bt_hash(const BlockTable *t, const char *key);
uint32_t bt_find(const BlockTable *t, const char *key, uint64_t h, BShard **sh, uint32_t *cell);
uint32_t bt_add(BlockTable *t, BShard *sh, uint64_t h, const char *key, uint32_t parent, const char *tokens,
                uint32_t depth, uint32_t tag);
void bt_drop(BlockTable *t, BShard *sh, uint32_t cell);
void bt_lru_back(BlockTable *t, uint32_t s);
int bt_root_acquire(BlockTable *t, const char *key, uint32_t *id);
void bt_root_release(BlockTable *t, uint32_t id);
void bt_free_all(BlockTable *t);
size_t bt_own_bytes(const BlockTable *t);

#endif
