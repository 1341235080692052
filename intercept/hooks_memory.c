/*
 * hooks_memory.c - every allocation and free path: exact bytes in use per device,
 * peak, failures, and the memory limit.
 *
 * Admission reserves the bytes with a compare-and-swap on bytes_in_use before the
 * driver is asked, so concurrent allocations from any number of threads can never
 * take the process over its limit; a refused or failed allocation gives them back.
 */
#include "address_map.h"
#include "alloc_table.h"
#include "intercept.h"

static struct alloc_table device_pointers; /* cuMemAlloc*, managed, async */
static struct alloc_table vmm_handles;     /* cuMemCreate */
static struct alloc_table arrays;          /* arrays and mipmapped arrays */

__attribute__((constructor)) static void init_tables(void)
{
    alloc_table_init(&device_pointers);
    alloc_table_init(&vmm_handles);
    alloc_table_init(&arrays);
}

static void fork_prepare(void)
{
    alloc_table_lock_all(&device_pointers);
    alloc_table_lock_all(&vmm_handles);
    alloc_table_lock_all(&arrays);
}

static void fork_parent(void)
{
    alloc_table_unlock_all(&arrays);
    alloc_table_unlock_all(&vmm_handles);
    alloc_table_unlock_all(&device_pointers);
}

/* The child owns none of the parent's device memory. */
static void fork_child(void)
{
    alloc_table_reset_in_child(&arrays);
    alloc_table_reset_in_child(&vmm_handles);
    alloc_table_reset_in_child(&device_pointers);
}
ALNAIR_ON_FORK(memory_fork, fork_prepare, fork_parent, fork_child);

/* Reserves size bytes on d; 0 if the limit refuses them. The limit charges the allocations and what
 * alnair_memory_overhead() adds (pools' cached memory, the contexts with the option on). A pooled
 * allocation is served from its pool's cache when that holds it all (*cached: what it took, given back if
 * it fails), so one that fits in what its pool holds is never refused; one refusal first reads the pools
 * exactly and trims their cache (pools.c), then looks again. */
static int admit(struct alnair_device *d, uint64_t size, int pool_slot, uint64_t *cached)
{
    uint64_t used = atomic_load(&d->bytes_in_use), limit = d->memory_limit_bytes;
    int looked_again = 0;
    *cached = 0;
    for (;;) {
        if (limit) {
            if (!*cached) *cached = alnair_pool_take_cached(d, pool_slot, size);
            uint64_t charged = used + alnair_memory_overhead(d);
            if (size > limit || charged > limit - size) {
                alnair_pool_return_cached(d, pool_slot, *cached);
                *cached = 0;
                if (size <= limit && !looked_again++ && alnair_pools_make_room(d, charged - (limit - size))) {
                    used = atomic_load(&d->bytes_in_use);
                    continue;
                }
                atomic_fetch_add_explicit(&d->limit_denied_allocations, 1, memory_order_relaxed);
                return 0;
            }
        }
        if (atomic_compare_exchange_weak(&d->bytes_in_use, &used, used + size)) break;
    }
    uint64_t peak = atomic_load(&d->peak_bytes), now = used + size;
    while (peak < now && !atomic_compare_exchange_weak(&d->peak_bytes, &peak, now)) {
    }
    return 1;
}

/* Gives bytes back, never below zero. */
static void release(struct alnair_device *d, uint64_t size)
{
    uint64_t used = atomic_load(&d->bytes_in_use);
    while (!atomic_compare_exchange_weak(&d->bytes_in_use, &used, used > size ? used - size : 0)) {
    }
}

/* In an allocation's table entry beside its device: it came from a pool (its slot in pools.c's table above
 * POOL_SHIFT, plus one; 0 if not known), so its free returns it to the pool's cache (charged at once, until
 * the pools' next reading says what the pool kept). */
#define POOLED 0x10000
#define POOL_SHIFT 17
#define FROM_POOL(slot) (POOLED | ((slot) + 1) << POOL_SHIFT)
#define POOL_SLOT(entry) (((entry) >> POOL_SHIFT) - 1)
#define NO_POOL (-1)

/* After the driver answered an admitted allocation: record it or undo the reservation. Device pointers
 * also go into the address map, so copies to and from them are known as device copies. */
static CUresult settle_as(CUresult r, struct alnair_device *d, struct alloc_table *t, uint64_t key, uint64_t size,
                          int pooled, uint64_t cached)
{
    if (r != CUDA_SUCCESS) {
        release(d, size);
        if (cached) alnair_pool_return_cached(d, POOL_SLOT(pooled), cached);
        atomic_fetch_add_explicit(&d->failed_allocations, 1, memory_order_relaxed);
        return r;
    }
    atomic_fetch_add_explicit(&d->allocations, 1, memory_order_relaxed);
    alnair_note_first(&alnair.first_allocation_boottime_ns);
    if (alloc_table_insert(t, key, size, alnair_device_ordinal(d) | pooled) != 0) release(d, size);
    else if (t == &device_pointers) alnair_address_map_add(key, size, alnair_device_ordinal(d));
    return r;
}

static CUresult settle(CUresult r, struct alnair_device *d, struct alloc_table *t, uint64_t key, uint64_t size)
{
    return settle_as(r, d, t, key, size, 0, 0);
}

/* The body every allocation shares: admit on d, ask the driver, record `key`. */
#define ALLOCATE_AS(d, table, size, real_call, key, pooled) \
    do { \
        if (!(d)) return real_call; \
        uint64_t cached_; \
        if (!admit(d, size, (pooled) ? POOL_SLOT(pooled) : NO_POOL, &cached_)) return CUDA_ERROR_OUT_OF_MEMORY; \
        CUresult r_ = real_call; \
        return settle_as(r_, d, table, r_ == CUDA_SUCCESS ? (uint64_t)(key) : 0, size, pooled, cached_); \
    } while (0)
#define ALLOCATE(d, table, size, real_call, key) ALLOCATE_AS(d, table, size, real_call, key, 0)

static int forget(struct alloc_table *t, uint64_t key, uint64_t *size, int *device)
{
    return alnair_active() && alloc_table_remove(t, key, size, device);
}

static CUresult freed(CUresult r, struct alloc_table *t, int known, uint64_t key, uint64_t size, int device)
{
    if (!known) return r;
    if (r != CUDA_SUCCESS) {
        alloc_table_insert(t, key, size, device);
        return r;
    }
    struct alnair_device *d = alnair_device_at(device & 0xffff);
    release(d, size);
    if (device & POOLED) alnair_pool_return_cached(d, POOL_SLOT(device), size);
    if (t == &device_pointers) alnair_address_map_remove(key, size);
    return r;
}

/* The body every free shares: forget the key before the driver may reuse it,
 * and put it back if the driver refuses the free. */
#define FREE(table, key, real_call) \
    do { \
        uint64_t size_ = 0; \
        int device_ = 0; \
        int known_ = forget(table, key, &size_, &device_); \
        return freed(real_call, table, known_, key, size_, device_); \
    } while (0)

static struct alnair_device *thread_device(void)
{
    return alnair_active() ? alnair_current_device() : NULL;
}

ALNAIR_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct alnair_device *d = thread_device();
    ALLOCATE(d, &device_pointers, bytesize, CALL_REAL(cuMemAlloc_v2, (dptr, bytesize)), *dptr);
}

ALNAIR_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    struct alnair_device *d = thread_device();
    ALLOCATE(d, &device_pointers, bytesize, CALL_REAL(cuMemAllocManaged, (dptr, bytesize, flags)), *dptr);
}

/* The pitch is known only afterwards: admit the unpadded size, then account the
 * padding the driver chose (it may pass the limit by at most one row's alignment). */
ALNAIR_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                          unsigned int ElementSizeBytes)
{
    struct alnair_device *d = thread_device();
    uint64_t estimate = (uint64_t)WidthInBytes * Height;
    if (!d) return CALL_REAL(cuMemAllocPitch_v2, (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    uint64_t none;
    if (!admit(d, estimate, NO_POOL, &none)) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = CALL_REAL(cuMemAllocPitch_v2, (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    uint64_t actual = r == CUDA_SUCCESS ? (uint64_t)*pPitch * Height : estimate;
    if (actual > estimate) atomic_fetch_add(&d->bytes_in_use, actual - estimate);
    return settle(r, d, &device_pointers, r == CUDA_SUCCESS ? *dptr : 0, actual);
}

/* From the device's current pool: the monitor reads that pool once this is set. */
static void allocates_async(struct alnair_device *d)
{
    if (d && ALNAIR_UNLIKELY(!atomic_load_explicit(&d->allocates_async, memory_order_relaxed)))
        atomic_store_explicit(&d->allocates_async, 1, memory_order_relaxed);
}

#define ALLOC_ASYNC(name) \
    ALNAIR_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) \
    { \
        struct alnair_device *d = thread_device(); \
        allocates_async(d); \
        int slot_ = d ? alnair_pool_current_slot(alnair_device_ordinal(d)) : NO_POOL; \
        ALLOCATE_AS(d, &device_pointers, bytesize, CALL_REAL(name, (dptr, bytesize, hStream)), *dptr, FROM_POOL(slot_)); \
    }
ALLOC_ASYNC(cuMemAllocAsync)
ALLOC_ASYNC(cuMemAllocAsync_ptsz)

/* The memory is the pool's device's (a pool created here is known with its device; another is taken
 * as the calling thread's device's, and remembered so its cache is charged). */
static struct alnair_device *pool_device(CUmemoryPool pool)
{
    struct alnair_device *d = thread_device();
    if (!d || !pool) return d;
    int known = alnair_pool_device(pool);
    if (known >= 0) return alnair_device_at(known);
    alnair_pool_note(pool, alnair_device_ordinal(d));
    return d;
}

#define ALLOC_FROM_POOL(name) \
    ALNAIR_EXPORT CUresult name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) \
    { \
        struct alnair_device *d = pool_device(pool); \
        ALLOCATE_AS(d, &device_pointers, bytesize, CALL_REAL(name, (dptr, bytesize, pool, hStream)), *dptr, \
                    FROM_POOL(alnair_pool_slot(pool))); \
    }
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync)
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz)

ALNAIR_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    FREE(&device_pointers, dptr, CALL_REAL(cuMemFree_v2, (dptr)));
}

#define FREE_ASYNC(name) \
    ALNAIR_EXPORT CUresult name(CUdeviceptr dptr, CUstream hStream) \
    { \
        FREE(&device_pointers, dptr, CALL_REAL(name, (dptr, hStream))); \
    }
FREE_ASYNC(cuMemFreeAsync)
FREE_ASYNC(cuMemFreeAsync_ptsz)

ALNAIR_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult r = CALL_REAL(cuMemPoolCreate, (pool, poolProps));
    if (r == CUDA_SUCCESS && pool && alnair_active()) {
        int dev = poolProps && poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? poolProps->location.id : -1;
        if (dev < 0) dev = alnair_device_ordinal(alnair_current_device() ?: alnair.devices);
        alnair_device_at(dev);
        alnair_pool_note(*pool, dev);
    }
    return r;
}

/* Forgotten first: the driver may hand the handle out again once it is destroyed. */
ALNAIR_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    int dev = alnair_active() ? alnair_pool_device(pool) : -1;
    if (dev >= 0) alnair_pool_forget(pool);
    CUresult r = CALL_REAL(cuMemPoolDestroy, (pool));
    if (dev >= 0 && r != CUDA_SUCCESS) alnair_pool_note(pool, dev);
    else if (dev >= 0) alnair_pools_read(dev);
    return r;
}

/* Virtual memory management: physical memory on the device the properties name. */
ALNAIR_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                   unsigned long long flags)
{
    struct alnair_device *d = NULL;
    if (alnair_active())
        d = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? alnair_device_at(prop->location.id)
                                                                        : alnair_current_device();
    ALLOCATE(d, &vmm_handles, size, CALL_REAL(cuMemCreate, (handle, size, prop, flags)), *handle);
}

ALNAIR_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    FREE(&vmm_handles, handle, CALL_REAL(cuMemRelease, (handle)));
}

/* A mapping of a handle's memory (how PyTorch's expandable segments grow) is device memory of the
 * handle's device; a handle this library did not see created (imported) is left unknown. */
ALNAIR_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                unsigned long long flags)
{
    CUresult r = CALL_REAL(cuMemMap, (ptr, size, offset, handle, flags));
    int device;
    if (r == CUDA_SUCCESS && alnair_active() && alloc_table_find(&vmm_handles, handle, &device))
        alnair_address_map_add(ptr, size, device);
    return r;
}

ALNAIR_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = CALL_REAL(cuMemUnmap, (ptr, size));
    if (r == CUDA_SUCCESS && alnair_active()) alnair_address_map_remove(ptr, size);
    return r;
}

static uint64_t array_bytes(size_t w, size_t h, size_t depth, int format, unsigned int channels)
{
    return (uint64_t)w * (h ? h : 1) * (depth ? depth : 1) * alnair_array_format_bytes(format) *
           (channels ? channels : 1);
}

ALNAIR_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    struct alnair_device *d = pAllocateArray ? thread_device() : NULL;
    uint64_t size = d ? array_bytes(pAllocateArray->Width, pAllocateArray->Height, 1, pAllocateArray->Format,
                                    pAllocateArray->NumChannels)
                      : 0;
    ALLOCATE(d, &arrays, size, CALL_REAL(cuArrayCreate_v2, (pHandle, pAllocateArray)), (uintptr_t)*pHandle);
}

static uint64_t array3d_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned int levels)
{
    uint64_t total = 0;
    size_t w = a->Width, h = a->Height, depth = a->Depth;
    for (unsigned int i = 0; i < (levels ? levels : 1); i++) {
        total += array_bytes(w, h, depth, a->Format, a->NumChannels);
        w = w > 1 ? w / 2 : 1, h = h > 1 ? h / 2 : h, depth = depth > 1 ? depth / 2 : depth;
    }
    return total;
}

ALNAIR_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    struct alnair_device *d = pAllocateArray ? thread_device() : NULL;
    uint64_t size = d ? array3d_bytes(pAllocateArray, 1) : 0;
    ALLOCATE(d, &arrays, size, CALL_REAL(cuArray3DCreate_v2, (pHandle, pAllocateArray)), (uintptr_t)*pHandle);
}

ALNAIR_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                              unsigned int numMipmapLevels)
{
    struct alnair_device *d = pMipmappedArrayDesc ? thread_device() : NULL;
    uint64_t size = d ? array3d_bytes(pMipmappedArrayDesc, numMipmapLevels) : 0;
    ALLOCATE(d, &arrays, size, CALL_REAL(cuMipmappedArrayCreate, (pHandle, pMipmappedArrayDesc, numMipmapLevels)),
             (uintptr_t)*pHandle);
}

ALNAIR_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    FREE(&arrays, (uintptr_t)hArray, CALL_REAL(cuArrayDestroy, (hArray)));
}

ALNAIR_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    FREE(&arrays, (uintptr_t)hMipmappedArray, CALL_REAL(cuMipmappedArrayDestroy, (hMipmappedArray)));
}

/* ---- what frameworks see: the limit is the device's size ----------------- */

ALNAIR_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUresult r = CALL_REAL(cuMemGetInfo_v2, (free, total));
    struct alnair_device *d = r == CUDA_SUCCESS && free && total ? thread_device() : NULL;
    if (d && d->memory_limit_bytes) {
        uint64_t used = atomic_load(&d->bytes_in_use) + alnair_memory_overhead(d), limit = d->memory_limit_bytes;
        uint64_t left = used < limit ? limit - used : 0;
        *total = limit < *total ? limit : *total;
        *free = left < *free ? left : *free;
    }
    return r;
}

ALNAIR_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r = CALL_REAL(cuDeviceTotalMem_v2, (bytes, dev));
    if (r == CUDA_SUCCESS && bytes && alnair_active() && dev >= 0 && dev < ALNAIR_CUDA_MAX_DEVICES) {
        uint64_t limit = alnair.devices[dev].memory_limit_bytes;
        if (limit && limit < *bytes) *bytes = limit;
    }
    return r;
}
