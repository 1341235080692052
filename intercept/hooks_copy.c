/*
 * hooks_copy.c - every cuMemcpy* entry point (ALNAIR_COPY_HOOKS in cuda_driver.h):
 * copies and bytes per device and direction, and the time synchronous copies took.
 *
 * The direction comes from the entry point where its name gives it (HtoD, DtoH,
 * a 2D/3D descriptor's memory types) and from the pointers where it does not
 * (cuMemcpy, cuMemcpyAsync, unified descriptors, batches): an address in device
 * memory the process allocated (address_map.h, two loads, no lock) is device
 * memory, anything else host memory, pageable or pinned alike. A copy counts on
 * the device at its device end (the destination's for device-to-device, so a peer
 * copy counts where it lands); an end the name says is device memory but the map
 * does not know (memory imported from another process) counts on the peer
 * context's device where the call names one, else on the calling thread's, as do
 * CUDA arrays. A copy between two host ends is not counted: it moves nothing to or
 * from a GPU.
 *
 * The hot path is the mode check, at most two map lookups and, once the driver has
 * accepted the copy, two relaxed atomic adds; a synchronous copy adds two clock
 * reads and a third add. No locks, syscalls or driver calls, except the one call
 * that asks a CUDA array's element size in a 3D batch (the bytes of such a copy
 * depend on it). Failed copies are not counted; a batch counts each of its copies.
 */
#include "address_map.h"
#include "intercept.h"

struct copy {
    struct alnair_device *device; /* NULL: not counted (host to host) */
    int direction;                /* enum alnair_copy_direction */
    uint64_t bytes;
};

static inline void count_copy(struct copy c, uint64_t sync_ns)
{
    if (!c.device) return;
    struct alnair_copy_counters *k = &c.device->copies[c.direction];
    atomic_fetch_add_explicit(&k->copies, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->bytes, c.bytes, memory_order_relaxed);
    if (sync_ns) atomic_fetch_add_explicit(&k->sync_ns, sync_ns, memory_order_relaxed);
}

/* ---- where each end is ---------------------------------------------------- */

/* The device whose memory holds p, or NULL for host memory. */
static inline struct alnair_device *device_of(CUdeviceptr p)
{
    int ordinal = alnair_address_device(p);
    return ordinal >= 0 ? alnair_device_at(ordinal) : NULL;
}

/* An end the entry point says is device memory: its own device, else the context's, else the thread's. */
static inline struct alnair_device *device_end(CUdeviceptr p, CUcontext ctx)
{
    struct alnair_device *d = device_of(p);
    if (!d && ctx) d = alnair_context_device(ctx);
    return d ? d : alnair_current_device();
}

static inline struct copy between(struct alnair_device *dst, struct alnair_device *src, uint64_t bytes)
{
    if (dst) return (struct copy){dst, src ? ALNAIR_COPY_DEVICE_TO_DEVICE : ALNAIR_COPY_HOST_TO_DEVICE, bytes};
    return (struct copy){src, ALNAIR_COPY_DEVICE_TO_HOST, bytes};
}

static inline struct copy unified(CUdeviceptr dst, CUdeviceptr src, uint64_t bytes)
{
    return between(device_of(dst), device_of(src), bytes);
}

static inline struct copy to_device(struct alnair_device *d, uint64_t bytes)
{
    return (struct copy){d, ALNAIR_COPY_HOST_TO_DEVICE, bytes};
}

static inline struct copy to_host(struct alnair_device *d, uint64_t bytes)
{
    return (struct copy){d, ALNAIR_COPY_DEVICE_TO_HOST, bytes};
}

static inline struct copy on_device(struct alnair_device *d, uint64_t bytes)
{
    return (struct copy){d, ALNAIR_COPY_DEVICE_TO_DEVICE, bytes};
}

/* One end of a 2D/3D copy by its memory type; NULL for host memory. */
static struct alnair_device *end_of(CUmemorytype type, CUdeviceptr p, CUcontext ctx)
{
    switch (type) {
    case CU_MEMORYTYPE_DEVICE: return device_end(p, ctx);
    case CU_MEMORYTYPE_ARRAY: return alnair_current_device();
    case CU_MEMORYTYPE_UNIFIED: return device_of(p);
    default: return NULL;
    }
}

static struct copy copy_2d(const CUDA_MEMCPY2D *c)
{
    return between(end_of(c->dstMemoryType, c->dstDevice, NULL), end_of(c->srcMemoryType, c->srcDevice, NULL),
                   (uint64_t)c->WidthInBytes * c->Height);
}

static struct copy copy_3d(const CUDA_MEMCPY3D *c)
{
    return between(end_of(c->dstMemoryType, c->dstDevice, NULL), end_of(c->srcMemoryType, c->srcDevice, NULL),
                   (uint64_t)c->WidthInBytes * c->Height * c->Depth);
}

static struct copy copy_3d_peer(const CUDA_MEMCPY3D_PEER *c)
{
    return between(end_of(c->dstMemoryType, c->dstDevice, c->dstContext),
                   end_of(c->srcMemoryType, c->srcDevice, c->srcContext),
                   (uint64_t)c->WidthInBytes * c->Height * c->Depth);
}

/* ---- batches ---------------------------------------------------------------- */

static void count_batch(const CUdeviceptr *dsts, const CUdeviceptr *srcs, const size_t *sizes, size_t count)
{
    for (size_t i = 0; i < count; i++) count_copy(unified(dsts[i], srcs[i], sizes[i]), 0);
}

static struct alnair_device *operand_end(const CUmemcpy3DOperand *o)
{
    return o->type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? alnair_current_device() : device_of(o->op.ptr.ptr);
}

/* Bytes per element of a batch copy: 1 between pointers, the array's element size otherwise (asked of the
 * driver: a CUDA array's format is not ours to know, and such copies are rare). */
static uint64_t element_bytes(const CUDA_MEMCPY3D_BATCH_OP *op)
{
    const CUmemcpy3DOperand *a = op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY   ? &op->src
                                 : op->dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ? &op->dst
                                                                                : NULL;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    cuArray3DGetDescriptor_v2_fn describe = a ? REAL(cuArray3DGetDescriptor_v2) : NULL;
    if (!describe || describe(&desc, a->op.array.array) != CUDA_SUCCESS) return 1;
    return alnair_array_format_bytes(desc.Format) * (desc.NumChannels ? desc.NumChannels : 1);
}

static void count_batch_3d(const CUDA_MEMCPY3D_BATCH_OP *ops, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const CUextent3D *e = &ops[i].extent;
        uint64_t bytes = (uint64_t)e->width * e->height * e->depth * element_bytes(&ops[i]);
        count_copy(between(operand_end(&ops[i].dst), operand_end(&ops[i].src), bytes), 0);
    }
}

/* ---- each family's copy, from its parameters -------------------------------- */

#define DESCRIBE_UNIFIED unified(dst, src, ByteCount)
#define DESCRIBE_UNIFIED_ASYNC DESCRIBE_UNIFIED
#define DESCRIBE_PEER on_device(device_end(dstDevice, dstContext), ByteCount)
#define DESCRIBE_PEER_ASYNC DESCRIBE_PEER
#define DESCRIBE_HTOD to_device(device_end(dstDevice, NULL), ByteCount)
#define DESCRIBE_HTOD_ASYNC DESCRIBE_HTOD
#define DESCRIBE_DTOH to_host(device_end(srcDevice, NULL), ByteCount)
#define DESCRIBE_DTOH_ASYNC DESCRIBE_DTOH
#define DESCRIBE_DTOD on_device(device_of(dstDevice) ?: device_end(srcDevice, NULL), ByteCount)
#define DESCRIBE_DTOD_ASYNC DESCRIBE_DTOD
#define DESCRIBE_DTOA on_device(device_end(srcDevice, NULL), ByteCount)
#define DESCRIBE_ATOD on_device(device_end(dstDevice, NULL), ByteCount)
#define DESCRIBE_HTOA to_device(alnair_current_device(), ByteCount)
#define DESCRIBE_HTOA_ASYNC DESCRIBE_HTOA
#define DESCRIBE_ATOH to_host(alnair_current_device(), ByteCount)
#define DESCRIBE_ATOH_ASYNC DESCRIBE_ATOH
#define DESCRIBE_ATOA on_device(alnair_current_device(), ByteCount)
#define DESCRIBE_2D copy_2d(pCopy)
#define DESCRIBE_2D_ASYNC DESCRIBE_2D
#define DESCRIBE_3D copy_3d(pCopy)
#define DESCRIBE_3D_ASYNC DESCRIBE_3D
#define DESCRIBE_3D_PEER copy_3d_peer(pCopy)
#define DESCRIBE_3D_PEER_ASYNC DESCRIBE_3D_PEER
#define COUNT_BATCH_12080 count_batch(dsts, srcs, sizes, count)
#define COUNT_BATCH COUNT_BATCH_12080
#define COUNT_BATCH_3D_12080 count_batch_3d(opList, numOps)
#define COUNT_BATCH_3D COUNT_BATCH_3D_12080

/* ---- the wrappers, one per row of ALNAIR_COPY_HOOKS ---------------------------- */

/* The copy is described after the driver accepted it: a failed copy costs nothing more. */
#define COPY_SYNC(name, family) \
    ALNAIR_EXPORT CUresult name ALNAIR_COPY_##family##_PARAMS \
    { \
        if (!alnair_active()) return CALL_REAL(name, ALNAIR_COPY_##family##_ARGS); \
        uint64_t start = alnair_monotonic_ns(); \
        CUresult r = CALL_REAL(name, ALNAIR_COPY_##family##_ARGS); \
        uint64_t took = alnair_monotonic_ns() - start; \
        if (r == CUDA_SUCCESS) count_copy(DESCRIBE_##family, took); \
        return r; \
    }

#define COPY_ASYNC(name, family) \
    ALNAIR_EXPORT CUresult name ALNAIR_COPY_##family##_PARAMS \
    { \
        if (!alnair_active()) return CALL_REAL(name, ALNAIR_COPY_##family##_ARGS); \
        CUresult r = CALL_REAL(name, ALNAIR_COPY_##family##_ARGS); \
        if (r == CUDA_SUCCESS) count_copy(DESCRIBE_##family, 0); \
        return r; \
    }

#define COPY_BATCH(name, family) \
    ALNAIR_EXPORT CUresult name ALNAIR_COPY_##family##_PARAMS \
    { \
        if (!alnair_active()) return CALL_REAL(name, ALNAIR_COPY_##family##_ARGS); \
        CUresult r = CALL_REAL(name, ALNAIR_COPY_##family##_ARGS); \
        if (r == CUDA_SUCCESS) COUNT_##family; \
        return r; \
    }

#define DEFINE_COPY(X, name, family, kind) COPY_##kind(name, family)
ALNAIR_COPY_HOOKS(DEFINE_COPY, unused)
