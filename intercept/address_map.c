/* address_map.c - see address_map.h. */
#include "address_map.h"

#include <stdlib.h>
#include <string.h>

#include "intercept.h"

#define GRANULES_PER_LEAF (1u << ALNAIR_MAP_LEAF_BITS)
#define DEVICE_MASK ((1u << ALNAIR_MAP_DEVICE_BITS) - 1)
#define ONE_ALLOCATION (1u << ALNAIR_MAP_DEVICE_BITS)

_Atomic(_Atomic uint32_t *) alnair_address_leaves[1u << ALNAIR_MAP_TOP_BITS];

/* The granule's slot; with create, its leaf is made if missing (NULL only if out of host memory). */
static _Atomic uint32_t *granule(uint64_t g, int create)
{
    _Atomic(_Atomic uint32_t *) *top = &alnair_address_leaves[g >> ALNAIR_MAP_LEAF_BITS];
    _Atomic uint32_t *leaf = atomic_load_explicit(top, memory_order_acquire);
    if (!leaf && create) {
        _Atomic uint32_t *made = calloc(GRANULES_PER_LEAF, sizeof *made);
        if (!made) return NULL;
        if (atomic_compare_exchange_strong_explicit(top, &leaf, made, memory_order_acq_rel, memory_order_acquire))
            leaf = made;
        else
            free(made); /* another thread made it first: leaf now holds theirs */
    }
    return leaf ? &leaf[g & (GRANULES_PER_LEAF - 1)] : NULL;
}

/* The granules [first, last] that [base, base + size) touches; 0 if none lies below 2^48. */
static int granules(uint64_t base, uint64_t size, uint64_t *first, uint64_t *last)
{
    uint64_t end = base + size - 1;
    if (!size || end < base || base >> ALNAIR_MAP_ADDRESS_BITS) return 0;
    if (end >> ALNAIR_MAP_ADDRESS_BITS) end = (1ull << ALNAIR_MAP_ADDRESS_BITS) - 1;
    *first = base >> ALNAIR_MAP_GRANULE_BITS;
    *last = end >> ALNAIR_MAP_GRANULE_BITS;
    return 1;
}

void alnair_address_map_add(uint64_t base, uint64_t size, int device)
{
    uint64_t first, last;
    if (!granules(base, size, &first, &last)) return;
    for (uint64_t g = first; g <= last; g++) {
        _Atomic uint32_t *slot = granule(g, 1);
        if (!slot) return; /* no host memory for a leaf: the rest reads as host memory */
        uint32_t old = atomic_load_explicit(slot, memory_order_relaxed), marked;
        do marked = ((old & ~DEVICE_MASK) + ONE_ALLOCATION) | (uint32_t)device;
        while (!atomic_compare_exchange_weak_explicit(slot, &old, marked, memory_order_relaxed, memory_order_relaxed));
    }
}

void alnair_address_map_remove(uint64_t base, uint64_t size)
{
    uint64_t first, last;
    if (!granules(base, size, &first, &last)) return;
    for (uint64_t g = first; g <= last; g++) {
        _Atomic uint32_t *slot = granule(g, 0);
        uint32_t old = slot ? atomic_load_explicit(slot, memory_order_relaxed) : 0;
        /* A granule never marked (mapped before the library saw it) stays at zero. */
        while (old >= ONE_ALLOCATION && !atomic_compare_exchange_weak_explicit(slot, &old, old - ONE_ALLOCATION,
                                                                                memory_order_relaxed,
                                                                                memory_order_relaxed)) {
        }
    }
}

/* The child owns none of the parent's device memory. It runs alone now, so the leaves can be cleared in place. */
static void fork_child(void)
{
    for (size_t i = 0; i < sizeof alnair_address_leaves / sizeof alnair_address_leaves[0]; i++) {
        _Atomic uint32_t *leaf = atomic_load_explicit(&alnair_address_leaves[i], memory_order_relaxed);
        if (leaf) memset((void *)leaf, 0, GRANULES_PER_LEAF * sizeof *leaf);
    }
}
ALNAIR_ON_FORK(address_map_fork, NULL, NULL, fork_child);
