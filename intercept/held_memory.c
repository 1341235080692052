/*
 * held_memory.c - what the GPU holds for this process beyond what the intercept
 * counts. A context's own memory is measured once, at its creation (state.c's
 * probe), but contexts grow afterwards: modules load lazily (cuBLAS's kernels at
 * its first use: 94 MiB measured on the H200), local memory is resized. With a
 * memory limit set, NVML is asked once a second (on its own thread, nvml_reader.c)
 * how much the process holds on each device it uses; at each new reading, what
 * exceeds allocations, pool caches and the measured contexts is the contexts'
 * growth, published as context memory and, with
 * ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT, charged.
 *
 * NVML names processes by the host's pids: in a pid namespace (a pod without
 * hostPID) the process's own pid is not in its list and the growth stays 0
 * (docs/intercept.md). A figure moves only when two readings in a row agree on
 * the direction (the smaller change of the two is taken), so an allocation or a
 * free that NVML and the counters see at different instants is not mistaken for
 * growth.
 */
#include "intercept.h"
#include "nvml_reader.h"

#include <stdlib.h>

static int64_t pending[ALNAIR_CUDA_MAX_DEVICES]; /* the last reading's change, not yet confirmed */

/* What NVML's new reading shows beyond what is counted, or -1 when there is none for us. */
static int64_t beyond_counted(int ordinal, const uint8_t *uuid, struct alnair_device *d)
{
    uint64_t held;
    if (!alnair_nvml_held_taken(ordinal, uuid, &held)) return -1;
    uint64_t counted = atomic_load_explicit(&d->bytes_in_use, memory_order_relaxed) +
                       atomic_load_explicit(&d->pool_cached_bytes, memory_order_relaxed) +
                       atomic_load_explicit(&d->context_bytes, memory_order_relaxed);
    return held > counted ? (int64_t)(held - counted) : 0;
}

static void follow(int ordinal, const uint8_t *uuid, struct alnair_device *d)
{
    int64_t beyond = beyond_counted(ordinal, uuid, d);
    if (beyond < 0) return;
    int64_t change = beyond - (int64_t)atomic_load_explicit(&d->context_growth_bytes, memory_order_relaxed);
    if ((change > 0 && pending[ordinal] > 0) || (change < 0 && pending[ordinal] < 0)) {
        int64_t step = llabs(change) < llabs(pending[ordinal]) ? change : pending[ordinal];
        atomic_fetch_add_explicit(&d->context_growth_bytes, (uint64_t)step, memory_order_relaxed);
        change -= step;
    }
    pending[ordinal] = change;
}

void alnair_held_memory_tick(const uint8_t *const uuids[ALNAIR_CUDA_MAX_DEVICES])
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
        struct alnair_device *d = &alnair.devices[i];
        if (d->memory_limit_bytes && atomic_load_explicit(&d->seen, memory_order_relaxed)) follow(i, uuids[i], d);
    }
}

/* A fork child holds none of its parent's device memory. */
static void fork_child(void)
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) pending[i] = 0;
}
ALNAIR_ON_FORK(held_memory_fork, NULL, NULL, fork_child);
