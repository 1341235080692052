/*
 * pools.c - stream-ordered memory pools (cuMemAllocAsync, cuMemAllocFromPoolAsync): what they hold
 * reserved beyond what they hand out, charged against the memory limit.
 *
 * A pool keeps freed memory reserved (up to its release threshold, which PyTorch sets to "never
 * release"), so counting allocations alone misses the cache. The cache is charged, not forbidden: each
 * allocation adds and each free subtracts its exact bytes (bytes_in_use), and the pools' cached memory
 * (reserved - used, read from the driver) is charged on top. The reading is a driver call, so it is
 * never made per allocation: the monitor thread reads every pool each period, and an allocation the
 * limit would refuse reads them exactly first and, if the cache is what stands in the way, trims it
 * (cuMemPoolTrimTo) so the allocation gets the cached memory instead of an out-of-memory error. An allocation
 * from a pool is first served from that pool's cache (its estimate per pool, read each period, less what
 * allocations took since, plus what frees gave back): that memory is charged already, so an allocation that
 * fits in what its pool holds is never refused, and one from another pool cannot borrow this one's cache.
 * docs/intercept.md ("Memory as the GPU sees it") gives the error bound.
 */
#include <pthread.h>

#include "intercept.h"

#define MAX_POOLS 256

struct pool_slot {
    _Atomic(CUmemoryPool) pool;
    _Atomic int device;
    _Atomic uint64_t cached; /* reserved - used at the last reading, less what allocations took since, plus frees */
};
static struct pool_slot pools[MAX_POOLS];
static _Atomic int current_slot[ALNAIR_CUDA_MAX_DEVICES]; /* each device's current pool, -1 until noted */
/* One reader at a time: the monitor and an allocation near the limit may both read and trim. */
static pthread_mutex_t read_lock = PTHREAD_MUTEX_INITIALIZER;

int alnair_pool_slot(CUmemoryPool pool)
{
    for (int i = 0; pool && i < MAX_POOLS; i++)
        if (atomic_load_explicit(&pools[i].pool, memory_order_acquire) == pool) return i;
    return -1;
}

int alnair_pool_device(CUmemoryPool pool)
{
    int slot = alnair_pool_slot(pool);
    return slot < 0 ? -1 : atomic_load_explicit(&pools[slot].device, memory_order_acquire);
}

int alnair_pool_current_slot(int ordinal)
{
    return atomic_load_explicit(&current_slot[ordinal], memory_order_relaxed);
}

uint64_t alnair_pool_take_cached(struct alnair_device *d, int slot, uint64_t size)
{
    if (slot < 0) return 0; /* which pool serves it is not known: charged in full */
    /* All or nothing: a block is contiguous, so a pool that holds less than it grows by the whole size and
     * keeps what it held (measured on the H200: a partial take let the charge pass the limit by 129 KiB). */
    uint64_t cached = atomic_load(&pools[slot].cached);
    do {
        if (cached < size) return 0;
    } while (!atomic_compare_exchange_weak(&pools[slot].cached, &cached, cached - size));
    uint64_t total = atomic_load(&d->pool_cached_bytes);
    while (!atomic_compare_exchange_weak(&d->pool_cached_bytes, &total, total > size ? total - size : 0)) {
    }
    return size;
}

void alnair_pool_return_cached(struct alnair_device *d, int slot, uint64_t bytes)
{
    if (slot >= 0) atomic_fetch_add_explicit(&pools[slot].cached, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&d->pool_cached_bytes, bytes, memory_order_relaxed);
}

void alnair_pool_note(CUmemoryPool pool, int device)
{
    if (!pool || device < 0 || device >= ALNAIR_CUDA_MAX_DEVICES) return;
    for (int i = 0; i < MAX_POOLS; i++)
        if (atomic_load_explicit(&pools[i].pool, memory_order_acquire) == pool) return; /* listed already */
    for (int i = 0; i < MAX_POOLS; i++) {
        CUmemoryPool expected = NULL;
        if (atomic_compare_exchange_strong(&pools[i].pool, &expected, pool)) {
            atomic_store_explicit(&pools[i].device, device, memory_order_release); /* -1 until now: skipped */
            return;
        }
        if (expected == pool) return; /* a racer noted it */
    }
    /* table full: this pool's cache is not charged (docs/intercept.md) */
}

void alnair_pool_forget(CUmemoryPool pool)
{
    for (int i = 0; pool && i < MAX_POOLS; i++) {
        if (atomic_load_explicit(&pools[i].pool, memory_order_acquire) != pool) continue;
        atomic_store_explicit(&pools[i].device, -1, memory_order_relaxed); /* before the slot is free again */
        CUmemoryPool expected = pool;
        if (atomic_compare_exchange_strong(&pools[i].pool, &expected, NULL)) return;
    }
}

/* A slot's device is -1 while it is free or being claimed. */
__attribute__((constructor)) static void init_pools(void)
{
    for (int i = 0; i < MAX_POOLS; i++) atomic_store(&pools[i].device, -1);
    for (int dev = 0; dev < ALNAIR_CUDA_MAX_DEVICES; dev++) atomic_store(&current_slot[dev], -1);
}

static uint64_t attribute(cuMemPoolGetAttribute_fn get, CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t v = 0;
    return get(pool, attr, &v) == CUDA_SUCCESS ? (uint64_t)v : 0;
}

static void read_locked(int ordinal)
{
    uint64_t reserved[ALNAIR_CUDA_MAX_DEVICES] = {0}, used[ALNAIR_CUDA_MAX_DEVICES] = {0};
    unsigned char has_pool[ALNAIR_CUDA_MAX_DEVICES] = {0};
    cuMemPoolGetAttribute_fn get = REAL(cuMemPoolGetAttribute);
    if (!get) return;
    for (int i = 0; i < MAX_POOLS; i++) {
        CUmemoryPool pool = atomic_load_explicit(&pools[i].pool, memory_order_acquire);
        int dev = atomic_load_explicit(&pools[i].device, memory_order_relaxed);
        if (!pool || dev < 0 || dev >= ALNAIR_CUDA_MAX_DEVICES || (ordinal >= 0 && dev != ordinal)) continue;
        uint64_t pool_reserved = attribute(get, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        uint64_t pool_used = attribute(get, pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        atomic_store_explicit(&pools[i].cached, pool_reserved > pool_used ? pool_reserved - pool_used : 0,
                              memory_order_relaxed);
        reserved[dev] += pool_reserved;
        used[dev] += pool_used;
        has_pool[dev] = 1;
    }
    for (int dev = 0; dev < ALNAIR_CUDA_MAX_DEVICES; dev++) {
        struct alnair_device *seen = &alnair.devices[dev];
        if (!has_pool[dev] && ordinal != dev && !atomic_load_explicit(&seen->pool_reserved_bytes, memory_order_relaxed))
            continue; /* never had a pool, or had none at the last reading either */
        struct alnair_device *d = &alnair.devices[dev];
        atomic_store_explicit(&d->pool_reserved_bytes, reserved[dev], memory_order_relaxed);
        atomic_store_explicit(&d->pool_used_bytes, used[dev], memory_order_relaxed);
        atomic_store_explicit(&d->pool_cached_bytes, reserved[dev] > used[dev] ? reserved[dev] - used[dev] : 0,
                              memory_order_relaxed);
    }
}

void alnair_pools_read(int ordinal)
{
    pthread_mutex_lock(&read_lock);
    read_locked(ordinal);
    pthread_mutex_unlock(&read_lock);
}

/* Trims the device's pools, each down to what it hands out plus what may stay cached, until `over`
 * bytes are released (or nothing more can be). */
static void trim_locked(int ordinal, uint64_t over)
{
    cuMemPoolGetAttribute_fn get = REAL(cuMemPoolGetAttribute);
    cuMemPoolTrimTo_fn trim = REAL(cuMemPoolTrimTo);
    if (!get || !trim) return;
    for (int i = 0; i < MAX_POOLS && over; i++) {
        CUmemoryPool pool = atomic_load_explicit(&pools[i].pool, memory_order_acquire);
        if (!pool || atomic_load_explicit(&pools[i].device, memory_order_relaxed) != ordinal) continue;
        uint64_t reserved = attribute(get, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        uint64_t used = attribute(get, pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        uint64_t cached = reserved > used ? reserved - used : 0, release = cached < over ? cached : over;
        if (!release) continue;
        trim(pool, (size_t)(reserved - release));
        uint64_t after = attribute(get, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        if (after + release > reserved) { /* a pool releases whole chunks: all it holds free, then */
            trim(pool, (size_t)used);
            after = attribute(get, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        }
        uint64_t released = after < reserved ? reserved - after : 0;
        over = released < over ? over - released : 0;
    }
}

static int device_has_pool(int ordinal)
{
    for (int i = 0; i < MAX_POOLS; i++)
        if (atomic_load_explicit(&pools[i].pool, memory_order_acquire) &&
            atomic_load_explicit(&pools[i].device, memory_order_relaxed) == ordinal)
            return 1;
    return 0;
}

static void note_current_pool(int ordinal)
{
    cuDeviceGetMemPool_fn current_pool = REAL(cuDeviceGetMemPool);
    CUmemoryPool pool = NULL;
    if (!current_pool || current_pool(&pool, ordinal) != CUDA_SUCCESS || !pool) return;
    alnair_pool_note(pool, ordinal);
    atomic_store_explicit(&current_slot[ordinal], alnair_pool_slot(pool), memory_order_relaxed);
}

int alnair_pools_make_room(struct alnair_device *d, uint64_t over)
{
    int ordinal = alnair_device_ordinal(d);
    if (atomic_load_explicit(&d->allocates_async, memory_order_relaxed)) note_current_pool(ordinal);
    if (!device_has_pool(ordinal)) return 0;
    uint64_t before = atomic_load(&d->pool_cached_bytes);
    pthread_mutex_lock(&read_lock);
    read_locked(ordinal);
    uint64_t now = atomic_load(&d->pool_cached_bytes);
    uint64_t still = now + over > before ? now + over - before : 0; /* what the exact reading leaves over */
    if (still && now) {
        trim_locked(ordinal, still);
        read_locked(ordinal);
    }
    pthread_mutex_unlock(&read_lock);
    return 1; /* the charge is exact now: worth one more look */
}

void alnair_pools_tick(void)
{
    int any = 0;
    for (int dev = 0; dev < ALNAIR_CUDA_MAX_DEVICES; dev++)
        if (atomic_load_explicit(&alnair.devices[dev].allocates_async, memory_order_relaxed)) note_current_pool(dev);
    for (int i = 0; i < MAX_POOLS && !any; i++) any = atomic_load_explicit(&pools[i].pool, memory_order_relaxed) != NULL;
    if (any) alnair_pools_read(-1);
}

static void fork_prepare(void) { pthread_mutex_lock(&read_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&read_lock); }
/* The child's pools are its own (a pool is not shared across fork). */
static void fork_child(void)
{
    for (int i = 0; i < MAX_POOLS; i++) atomic_store(&pools[i].pool, NULL), atomic_store(&pools[i].device, -1);
    for (int dev = 0; dev < ALNAIR_CUDA_MAX_DEVICES; dev++) atomic_store(&current_slot[dev], -1);
    pthread_mutex_init(&read_lock, NULL);
}
ALNAIR_ON_FORK(pools_fork, fork_prepare, fork_parent, fork_child);
