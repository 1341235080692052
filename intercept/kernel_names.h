/*
 * kernel_names.h - which kernels a process launches, by name, per device; and how many it launches.
 *
 * The launch path counts each kernel handle (CUfunction, or a CUkernel passed in its place) in its device's
 * hash table: a multiply, a shift, one compare and one relaxed atomic add when the handle owns its slot. That add is
 * the only one a kernel launch makes: the device's kernel launches are the table's sum. The monitor thread names
 * handles it has not seen (cuFuncGetName / cuKernelGetName, demangled when the process has a C++ runtime), adds
 * each name's launches up and publishes the most launched ones, then each device's other launches.
 */
#ifndef ALNAIR_KERNEL_NAMES_H
#define ALNAIR_KERNEL_NAMES_H

#include <stdatomic.h>
#include <stdint.h>

#include "alnair_shm.h"

#define ALNAIR_KERNEL_SLOT_BITS 10
#define ALNAIR_KERNEL_SLOTS (1u << ALNAIR_KERNEL_SLOT_BITS) /* per device; kernels that find no slot count in OTHER */
#define ALNAIR_KERNEL_NAMES_TOP_MAX 32
#define ALNAIR_KERNEL_NAMES_TOP_DEFAULT 20

/* Kernel handles and their launches, slot by slot (two arrays: one index reaches both). Slot 0 is never claimed: a
 * launch of a NULL handle (which the driver refuses anyway) hashes there, matches its empty key and counts in a slot
 * nobody reads. */
struct alnair_kernel_table {
    _Atomic uintptr_t functions[ALNAIR_KERNEL_SLOTS]; /* 0: free */
    _Atomic uint64_t launches[ALNAIR_KERNEL_SLOTS];
    _Atomic uint64_t unslotted; /* launches of handles that found no slot */
};

/* Fibonacci hashing: the top bits of the handle times 2^64 / phi. Handles are addresses; kernels of modules loaded a
 * page or more apart would share their low bits, which alone would send them to a few slots and run the 16-slot
 * probe out. The multiply mixes every bit into the top ones, for the shift and mask it replaces. NULL: slot 0. */
static inline unsigned alnair_kernel_slot_of(uintptr_t function)
{
    return (unsigned)(((uint64_t)function * 0x9E3779B97F4A7C15ull) >> (64 - ALNAIR_KERNEL_SLOT_BITS));
}

void alnair_kernel_count_slow(struct alnair_kernel_table *table, uintptr_t function);

/* One accepted launch of `function`. */
static inline void alnair_kernel_count(struct alnair_kernel_table *table, const void *function)
{
    unsigned i = alnair_kernel_slot_of((uintptr_t)function);
    if (__builtin_expect(atomic_load_explicit(&table->functions[i], memory_order_relaxed) == (uintptr_t)function, 1))
        atomic_fetch_add_explicit(&table->launches[i], 1, memory_order_relaxed);
    else
        alnair_kernel_count_slow(table, (uintptr_t)function);
}

/* The device's kernel launches so far: the table's sum (monitor thread: 1025 loads). */
uint64_t alnair_kernel_launches(struct alnair_kernel_table *table);

/* Monitor thread, under the publisher's lock: names new handles (not while `exiting`: the driver may be gone)
 * and fills the record's kernel table for the devices the record lists (ordinals[0 .. count)), and launches[k]
 * with device ordinals[k]'s kernel launches, from the same pass over its table. */
void alnair_kernel_names_publish(struct alnair_cuda_kernels *out, const int *ordinals, int count, int exiting,
                                 uint64_t *launches);

#endif
