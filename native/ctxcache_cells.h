/* The open-addressing cell tables behind ctxcache_order.c's key -> slot map and
 * ctxcache_blocks.c's: one per shard, each doubling alone at 3/4 full (the callers' rule), linear
 * probing, deletes by backward shift (no tombstones). A cell is (low 32 bits of the key's hash)
 * << 32 | (slot + 1); 0 is empty. The callers own the lookup (how a key is compared). */
#ifndef CTXCACHE_CELLS_H
#define CTXCACHE_CELLS_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    uint64_t *cells;
    uint32_t mask, count;
} CellShard;

static inline void cell_put(CellShard *sh, uint64_t cell) {
    uint32_t i = (uint32_t)(cell >> 32) & sh->mask;
    while (sh->cells[i]) i = (i + 1) & sh->mask;
    sh->cells[i] = cell;
}

/* Twice the cells (8 at first), the old ones put again: 0, or -1 when out of memory or past a
 * 32-bit mask. */
static inline int cell_grow(CellShard *sh) {
    uint64_t cap = sh->cells ? ((uint64_t)sh->mask + 1) * 2 : 8;
    if (cap > ((uint64_t)1 << 31)) return -1;
    uint64_t *old = sh->cells, *cells = PyMem_Calloc((size_t)cap, sizeof(uint64_t));
    if (cells == NULL) return -1;
    uint32_t oldcap = old ? sh->mask + 1 : 0;
    sh->cells = cells;
    sh->mask = (uint32_t)(cap - 1);
    for (uint32_t i = 0; i < oldcap; i++)
        if (old[i]) cell_put(sh, old[i]);
    PyMem_Free(old);
    return 0;
}

/* Backward shift: later cells of the run move up unless already at or past their home. */
static inline void cell_del(CellShard *sh, uint32_t i) {
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & sh->mask;
        uint64_t c = sh->cells[j];
        if (c == 0) break;
        uint32_t home = (uint32_t)(c >> 32) & sh->mask;
        if (((j - home) & sh->mask) >= ((j - i) & sh->mask)) {
            sh->cells[i] = c;
            i = j;
        }
    }
    sh->cells[i] = 0;
    sh->count--;
}

#endif
