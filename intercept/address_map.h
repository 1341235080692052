/*
 * address_map.h - which device's memory an address lies in, for classifying copies.
 *
 * A copy through cuMemcpy, cuMemcpyAsync or a batch names no direction: the
 * pointers do, and asking the driver (cuPointerGetAttribute) on every copy would
 * cost a driver call. Device memory the process allocated is marked here instead,
 * in 2 MiB granules (the GPU's large page and the virtual memory granularity: the
 * driver hands out device memory in such pages of one device, so a granule holds
 * one device's memory and no host memory), each holding the device and how many
 * live allocations overlap it, so a free unmarks exactly what its allocation
 * marked even when small allocations share a granule. Reads take
 * two loads and no lock; marking happens on allocation and free, never on a copy.
 * The table is two-level over 48-bit addresses (the x86-64 and arm64 user space
 * CUDA uses): a static array of 8 GiB leaves, each made on first use and kept for
 * the life of the process (16 KiB per 8 GiB of address space that ever held
 * device memory). Addresses beyond 2^48 read as host memory.
 */
#ifndef ALNAIR_ADDRESS_MAP_H
#define ALNAIR_ADDRESS_MAP_H

#include <stdatomic.h>
#include <stdint.h>

#define ALNAIR_MAP_ADDRESS_BITS 48
#define ALNAIR_MAP_GRANULE_BITS 21 /* 2 MiB */
#define ALNAIR_MAP_LEAF_BITS 12    /* 4096 granules: 8 GiB per leaf */
#define ALNAIR_MAP_TOP_BITS (ALNAIR_MAP_ADDRESS_BITS - ALNAIR_MAP_GRANULE_BITS - ALNAIR_MAP_LEAF_BITS)
#define ALNAIR_MAP_DEVICE_BITS 6   /* a granule: live allocations << 6 | device ordinal (0-63) */

extern _Atomic(_Atomic uint32_t *) alnair_address_leaves[1u << ALNAIR_MAP_TOP_BITS];

/* The device ordinal whose memory holds address p, or -1 for memory the process did not allocate on a
 * device (host memory, pageable or pinned). Lock-free; any thread, any time. */
static inline int alnair_address_device(uint64_t p)
{
    if (p >> ALNAIR_MAP_ADDRESS_BITS) return -1;
    _Atomic uint32_t *leaf = atomic_load_explicit(
        &alnair_address_leaves[p >> (ALNAIR_MAP_GRANULE_BITS + ALNAIR_MAP_LEAF_BITS)], memory_order_acquire);
    if (!leaf) return -1;
    uint32_t granule = atomic_load_explicit(
        &leaf[(p >> ALNAIR_MAP_GRANULE_BITS) & ((1u << ALNAIR_MAP_LEAF_BITS) - 1)], memory_order_relaxed);
    return granule >> ALNAIR_MAP_DEVICE_BITS ? (int)(granule & ((1u << ALNAIR_MAP_DEVICE_BITS) - 1)) : -1;
}

/* [base, base + size) is device memory of `device` now: an allocation, or a mapping of one. */
void alnair_address_map_add(uint64_t base, uint64_t size, int device);
/* The allocation or mapping that added [base, base + size) is gone. */
void alnair_address_map_remove(uint64_t base, uint64_t size);

#endif
