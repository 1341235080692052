/*
 * fake_libcuda.c - TEST DOUBLE of the NVIDIA driver library, built by the tests
 * as libcuda.so.1 so programs load it exactly as the CUDA runtime loads the real
 * one (dlopen "libcuda.so.1", then cuGetProcAddress_v2 for everything else).
 *
 * It keeps devices, contexts (per-thread current context, a push/pop stack) and
 * allocations like the driver does at its API boundary, resolves cuGetProcAddress
 * queries to _v2/_v4/_ptsz variants by version and flags like the driver, and
 * counts every call it receives so tests can prove a call reached the driver.
 *
 * Environment: FAKE_CUDA_DEVICES (default 4), FAKE_CUDA_DEVICE_BYTES (default
 * 16 GiB), FAKE_CUDA_LAUNCH_NS (time each launch takes, default 0: the caller sleeps,
 * like a GPU running the kernel synchronously, so a loaded CPU changes little), FAKE_CUDA_BARE
 * (launches return at once, uncounted: for measuring the intercept's own cost),
 * FAKE_CUDA_SHARED_GPU (a file standing for one GPU that several processes share:
 * each timed launch marks it running, and a launch that finds it already running,
 * which a real time-sliced GPU would have to interleave, is counted as an overlap),
 * FAKE_CUDA_ASYNC (timed launches queue their time on the device and return at
 * once, like a real GPU's queue; the synchronize calls sleep until it drains),
 * FAKE_CUDA_WINDOW_NS (with FAKE_CUDA_ASYNC: the queued work's time that runs
 * outside [0, this) of every 100 ms period, a limited process's window alone, is
 * told by fake_cuda_outside_window_ns), FAKE_CUDA_STALL_AFTER and FAKE_CUDA_STALL_NS (with
 * FAKE_CUDA_ASYNC: once, the work of that many launches done, the device runs something else for
 * that long before the next launch's work, as a time-sliced GPU runs another context's slice),
 * FAKE_CUDA_COPY_NS (time each copy call takes, default 0: asynchronous ones too, so
 * a test can tell they are not timed). A copy of more bytes than a device holds is
 * refused, like an out-of-range copy. FAKE_CUDA_CONTEXT_BYTES (default 0): device memory each context
 * holds itself (a primary context from its first retain), given back when it is destroyed.
 *
 * Kernel names: handles FAKE_KERNEL_BASE + FAKE_KERNEL_STRIDE * k (default stride 64; what the client launches, with
 * the same setting) are named like the driver's
 * cuFuncGetName names them: k < 1000 "fake_kernel_<k>" for even k and its C++ mangling (of fake_kernel_<k>(float*))
 * for odd k; k 1000-1999 are context-independent kernels (cuKernelGetName only: "library_kernel_<k>"); k 3000 has
 * a name of 300 bytes with a tab and a newline in it; any other handle has no name (CUDA_ERROR_INVALID_HANDLE).
 *
 * Stream-ordered pools: each device has a default pool (its current pool), cuMemPoolCreate makes more.
 * A pool reserves device memory in FAKE_CUDA_POOL_GRANULE steps (default 2 MiB) when what it holds free
 * is too small, keeps freed memory reserved, and releases what it holds free above its release threshold
 * (default 0) at the next synchronize, or down to a size on cuMemPoolTrimTo, like the driver's pools.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_driver.h"

#define EXPORT __attribute__((visibility("default")))
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define MAX_DEVICES 64
#define MAX_ALLOCS 65536
#define MAX_CALLED 256

struct CUctx_st {
    int device;
    int retained; /* a primary context: it holds its memory from the first retain */
};

#define MAX_POOLS (MAX_DEVICES + 64) /* the default pools, then created ones */
struct CUmemPoolHandle_st {
    int device;
    int live;
    uint64_t reserved, used, threshold;
};
static struct CUmemPoolHandle_st pools[MAX_POOLS];
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

static int n_devices = 4;
static uint64_t device_bytes = 16ull << 30;
static uint64_t launch_ns;
static uint64_t copy_ns;
static int bare_launches;
static uint64_t context_bytes;
static uint64_t pool_granule = 2ull << 20;

/* The FAKE_CUDA_SHARED_GPU file's layout (tests read it with struct "<iiQQ"). */
struct shared_gpu {
    _Atomic int32_t running;
    int32_t pad;
    _Atomic uint64_t launches;
    _Atomic uint64_t overlaps;
};
static struct shared_gpu *shared_gpu;
static int async_launches;
static uint64_t queue_drained_at; /* FAKE_CUDA_ASYNC: when the queued launches are done */
static uint64_t window_ns;        /* FAKE_CUDA_WINDOW_NS */
static uint64_t outside_window_ns; /* queued work's time outside it */
static uint64_t stall_after, stall_ns; /* FAKE_CUDA_STALL_AFTER, FAKE_CUDA_STALL_NS */
static uint64_t queued_launches;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;

static void map_shared_gpu(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, sizeof *shared_gpu) != 0) abort();
    shared_gpu = mmap(NULL, sizeof *shared_gpu, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shared_gpu == MAP_FAILED) abort();
    close(fd);
}
static struct CUctx_st primary[MAX_DEVICES];
static _Atomic uint64_t used[MAX_DEVICES];
static _Atomic uint64_t next_address[MAX_DEVICES];
static __thread CUcontext stack[16];
static __thread int depth;

struct allocation {
    uint64_t key;
    uint64_t size;
    int device;
    int format;            /* arrays: CUarray_format and channels, for cuArray3DGetDescriptor_v2 */
    unsigned int channels;
    struct CUmemPoolHandle_st *pool; /* from a pool: its free goes back there */
};
static struct allocation allocations[MAX_ALLOCS];
static pthread_mutex_t allocations_lock = PTHREAD_MUTEX_INITIALIZER;

struct called {
    const char *name;
    _Atomic uint64_t count;
};
static struct called called[MAX_CALLED];
static pthread_mutex_t called_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void configure(void)
{
    const char *v;
    if ((v = getenv("FAKE_CUDA_DEVICES"))) n_devices = atoi(v);
    if ((v = getenv("FAKE_CUDA_DEVICE_BYTES"))) device_bytes = strtoull(v, NULL, 10);
    if ((v = getenv("FAKE_CUDA_LAUNCH_NS"))) launch_ns = strtoull(v, NULL, 10);
    if ((v = getenv("FAKE_CUDA_COPY_NS"))) copy_ns = strtoull(v, NULL, 10);
    bare_launches = getenv("FAKE_CUDA_BARE") != NULL;
    if ((v = getenv("FAKE_CUDA_SHARED_GPU"))) map_shared_gpu(v);
    async_launches = getenv("FAKE_CUDA_ASYNC") != NULL;
    if ((v = getenv("FAKE_CUDA_WINDOW_NS"))) window_ns = strtoull(v, NULL, 10);
    if ((v = getenv("FAKE_CUDA_STALL_AFTER"))) stall_after = strtoull(v, NULL, 10);
    if ((v = getenv("FAKE_CUDA_STALL_NS"))) stall_ns = strtoull(v, NULL, 10);
    if ((v = getenv("FAKE_CUDA_CONTEXT_BYTES"))) context_bytes = strtoull(v, NULL, 10);
    if ((v = getenv("FAKE_CUDA_POOL_GRANULE"))) pool_granule = strtoull(v, NULL, 10);
    for (int i = 0; i < MAX_DEVICES; i++) {
        pools[i] = (struct CUmemPoolHandle_st){.device = i, .live = 1};
        primary[i].device = i;
        next_address[i] = ((uint64_t)i + 1) << 40;
    }
}

/* Counts a call by the exported name it arrived through. */
static void record(const char *name)
{
    for (int i = 0; i < MAX_CALLED; i++) {
        const char *n = __atomic_load_n(&called[i].name, __ATOMIC_ACQUIRE);
        if (n && strcmp(n, name) == 0) {
            atomic_fetch_add(&called[i].count, 1);
            return;
        }
        if (!n) {
            pthread_mutex_lock(&called_lock);
            if (!called[i].name) __atomic_store_n(&called[i].name, name, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&called_lock);
            i--; /* look at this slot again */
        }
    }
}

EXPORT uint64_t fake_cuda_calls(const char *name)
{
    for (int i = 0; i < MAX_CALLED && called[i].name; i++)
        if (strcmp(called[i].name, name) == 0) return atomic_load(&called[i].count);
    return 0;
}

EXPORT uint64_t fake_cuda_used_bytes(int device) { return device >= 0 && device < MAX_DEVICES ? used[device] : 0; }

static CUcontext current(void) { return depth ? stack[depth - 1] : NULL; }

static int current_device(void) { return current() ? current()->device : -1; }

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec t = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&t, &t) != 0) {
    }
}

#define PERIOD_NS 100000000ull

/* Of a kernel that runs over [start, start + launch_ns), the time past the window. */
static uint64_t outside_window(uint64_t start)
{
    uint64_t outside = 0;
    for (uint64_t t = start, end = start + launch_ns; t < end;) {
        uint64_t period_end = t - t % PERIOD_NS + PERIOD_NS, until = end < period_end ? end : period_end;
        uint64_t window_end = t - t % PERIOD_NS + window_ns;
        outside += until - (t > window_end ? t : window_end > until ? until : window_end);
        t = until;
    }
    return outside;
}

EXPORT uint64_t fake_cuda_outside_window_ns(void) { return outside_window_ns; }

static void queue_kernel(void)
{
    pthread_mutex_lock(&queue_lock);
    uint64_t now = now_ns(), start = queue_drained_at > now ? queue_drained_at : now;
    if (stall_ns && ++queued_launches == stall_after + 1) start += stall_ns;
    queue_drained_at = start + launch_ns;
    if (window_ns) outside_window_ns += outside_window(start);
    pthread_mutex_unlock(&queue_lock);
}

static CUresult wait_for_queue(void)
{
    pthread_mutex_lock(&queue_lock);
    uint64_t drained = queue_drained_at;
    pthread_mutex_unlock(&queue_lock);
    uint64_t now = now_ns();
    if (drained > now) sleep_ns(drained - now);
    return CUDA_SUCCESS;
}

static void run_kernel(void)
{
    if (!launch_ns) return;
    if (async_launches) return queue_kernel();
    if (shared_gpu) {
        atomic_fetch_add(&shared_gpu->launches, 1);
        if (atomic_fetch_add(&shared_gpu->running, 1) > 0) atomic_fetch_add(&shared_gpu->overlaps, 1);
    }
    sleep_ns(launch_ns);
    if (shared_gpu) atomic_fetch_sub(&shared_gpu->running, 1);
}

/* ---- allocations --------------------------------------------------------- */

static CUresult take_array(int device, uint64_t size, int format, unsigned int channels, uint64_t *key)
{
    if (device < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (device >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    uint64_t u = atomic_load(&used[device]);
    do {
        if (u + size > device_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    } while (!atomic_compare_exchange_weak(&used[device], &u, u + size));
    *key = atomic_fetch_add(&next_address[device], (size + 0xfff) & ~0xfffull) ?: 1;
    pthread_mutex_lock(&allocations_lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocations[i].key) {
            allocations[i] = (struct allocation){*key, size, device, format, channels};
            break;
        }
    }
    pthread_mutex_unlock(&allocations_lock);
    return CUDA_SUCCESS;
}

static CUresult take(int device, uint64_t size, uint64_t *key) { return take_array(device, size, 0, 0, key); }

static CUresult give_back(uint64_t key)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&allocations_lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocations[i].key == key && key) {
            if (allocations[i].pool) {
                pthread_mutex_lock(&pools_lock);
                allocations[i].pool->used -= allocations[i].size;
                pthread_mutex_unlock(&pools_lock);
            } else {
                atomic_fetch_sub(&used[allocations[i].device], allocations[i].size);
            }
            allocations[i].key = 0;
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&allocations_lock);
    return r;
}

/* ---- the entry points ---------------------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags)
{
    (void)flags;
    record("cuInit");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
    *count = n_devices;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (ordinal < 0 || ordinal >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    record("cuDeviceGetUuid_v2");
    if (dev < 0 || dev >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    for (int i = 0; i < 16; i++) uuid->bytes[i] = (char)(0xf0 + i);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    record("cuDevicePrimaryCtxRetain");
    if (dev < 0 || dev >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    if (!__atomic_exchange_n(&primary[dev].retained, 1, __ATOMIC_ACQ_REL)) atomic_fetch_add(&used[dev], context_bytes);
    *pctx = &primary[dev];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    record("cuCtxSetCurrent");
    if (!ctx) depth = 0;
    else if (depth) stack[depth - 1] = ctx;
    else stack[depth++] = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    record("cuCtxGetCurrent");
    *pctx = current();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
    record("cuCtxGetDevice");
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = current()->device;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    record("cuCtxPushCurrent_v2");
    if (!ctx || depth == 16) return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    record("cuCtxPopCurrent_v2");
    if (!depth) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext top = stack[--depth];
    if (pctx) *pctx = top;
    return CUDA_SUCCESS;
}

static CUresult create_context(CUcontext *pctx, CUdevice dev)
{
    if (dev < 0 || dev >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    if (depth == 16) return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = calloc(1, sizeof *ctx);
    ctx->device = dev;
    atomic_fetch_add(&used[dev], context_bytes);
    stack[depth++] = ctx;
    *pctx = ctx;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    (void)flags;
    record("cuCtxCreate_v2");
    return create_context(pctx, dev);
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    (void)params, (void)flags;
    record("cuCtxCreate_v4");
    return create_context(pctx, dev);
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    record("cuCtxDestroy_v2");
    if (depth && stack[depth - 1] == ctx) depth--; /* the driver pops a destroyed context that was current */
    for (int i = 0; i < depth; i++)
        if (stack[i] == ctx) stack[i] = NULL;
    if (ctx < primary || ctx >= primary + MAX_DEVICES) {
        atomic_fetch_sub(&used[ctx->device], context_bytes);
        free(ctx);
    }
    return CUDA_SUCCESS;
}

/* Streams of this double are contexts (NULL = the current one). */
EXPORT CUresult cuStreamGetCtx(CUstream stream, CUcontext *pctx)
{
    record("cuStreamGetCtx");
    *pctx = stream ? (CUcontext)stream : current();
    return *pctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* FAKE_CUDA_CAPTURING: every stream says it is capturing a graph. */
#define IS_CAPTURING(name) \
    EXPORT CUresult name(CUstream stream, CUstreamCaptureStatus *status) \
    { \
        (void)stream; \
        record(#name); \
        *status = getenv("FAKE_CUDA_CAPTURING") != NULL; \
        return CUDA_SUCCESS; \
    }
IS_CAPTURING(cuStreamIsCapturing)
IS_CAPTURING(cuStreamIsCapturing_ptsz)

static CUresult launch(const char *name)
{
    if (bare_launches) return CUDA_SUCCESS;
    record(name);
    if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
    run_kernel();
    return CUDA_SUCCESS;
}

#define LAUNCH(name, params) \
    EXPORT CUresult name params { return launch(#name); }
LAUNCH(cuLaunchKernel, ALNAIR_LAUNCH_PARAMS)
LAUNCH(cuLaunchKernel_ptsz, ALNAIR_LAUNCH_PARAMS)
LAUNCH(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))
LAUNCH(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra))
LAUNCH(cuLaunchCooperativeKernel, ALNAIR_COOP_PARAMS)
LAUNCH(cuLaunchCooperativeKernel_ptsz, ALNAIR_COOP_PARAMS)
LAUNCH(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream))
LAUNCH(cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream))

EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int n, unsigned int flags)
{
    (void)flags;
    record("cuLaunchCooperativeKernelMultiDevice");
    for (unsigned int i = 0; i < n; i++)
        if (!list[i].hStream) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* ---- kernel names ----------------------------------------------------------- */

#define FAKE_KERNEL_BASE 0x100000u

static int fake_kernel(const void *handle)
{
    const char *setting = getenv("FAKE_KERNEL_STRIDE");
    uintptr_t v = (uintptr_t)handle, stride = setting ? strtoul(setting, NULL, 10) : 64;
    return v >= FAKE_KERNEL_BASE && (v - FAKE_KERNEL_BASE) % stride == 0 ? (int)((v - FAKE_KERNEL_BASE) / stride) : -1;
}

static char kernel_name[512]; /* the driver's own storage; the caller copies it */

EXPORT CUresult cuFuncGetName(const char **name, CUfunction f)
{
    record("cuFuncGetName");
    int k = fake_kernel(f);
    if (!name || k < 0 || (k >= 1000 && k != 3000)) return CUDA_ERROR_INVALID_HANDLE;
    char plain[32];
    snprintf(plain, sizeof plain, "fake_kernel_%d", k);
    if (k == 3000) {
        memset(kernel_name, 'x', 300);
        memcpy(kernel_name, "long\tname\n", 10);
        kernel_name[300] = 0;
    } else if (k % 2) {
        snprintf(kernel_name, sizeof kernel_name, "_Z%zu%sPf", strlen(plain), plain);
    } else {
        snprintf(kernel_name, sizeof kernel_name, "%s", plain);
    }
    *name = kernel_name;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuKernelGetName(const char **name, CUkernel kernel)
{
    record("cuKernelGetName");
    int k = fake_kernel(kernel);
    if (!name || k < 1000 || k >= 2000) return CUDA_ERROR_INVALID_HANDLE;
    snprintf(kernel_name, sizeof kernel_name, "library_kernel_%d", k);
    *name = kernel_name;
    return CUDA_SUCCESS;
}

/* ---- stream-ordered pools ------------------------------------------------ */

static int pool_valid(CUmemoryPool p) { return p >= pools && p < pools + MAX_POOLS && p->live; }

/* Hands out size bytes of the pool, reserving more device memory in granules when too little is free. */
static CUresult pool_take(CUmemoryPool p, uint64_t size, uint64_t *key)
{
    if (!pool_valid(p)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    uint64_t free_in_pool = p->reserved - p->used;
    if (free_in_pool < size) {
        uint64_t grow = (size - free_in_pool + pool_granule - 1) / pool_granule * pool_granule;
        uint64_t u = atomic_load(&used[p->device]);
        do {
            if (u + grow > device_bytes) {
                pthread_mutex_unlock(&pools_lock);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        } while (!atomic_compare_exchange_weak(&used[p->device], &u, u + grow));
        p->reserved += grow;
    }
    p->used += size;
    pthread_mutex_unlock(&pools_lock);
    *key = atomic_fetch_add(&next_address[p->device], (size + 0xfff) & ~0xfffull) ?: 1;
    pthread_mutex_lock(&allocations_lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (!allocations[i].key) {
            allocations[i] = (struct allocation){*key, size, p->device, 0, 0, p};
            break;
        }
    }
    pthread_mutex_unlock(&allocations_lock);
    return CUDA_SUCCESS;
}

/* Releases what the pool holds free, down to keep bytes reserved (whole granules, never below its use). */
static void pool_release_to(CUmemoryPool p, uint64_t keep)
{
    uint64_t floor = (p->used + pool_granule - 1) / pool_granule * pool_granule;
    uint64_t target = keep > floor ? (keep + pool_granule - 1) / pool_granule * pool_granule : floor;
    if (target < p->reserved) {
        atomic_fetch_sub(&used[p->device], p->reserved - target);
        p->reserved = target;
    }
}

static void pools_synchronized(void)
{
    pthread_mutex_lock(&pools_lock);
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i].live && pools[i].reserved > pools[i].threshold) pool_release_to(&pools[i], pools[i].threshold);
    pthread_mutex_unlock(&pools_lock);
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    record("cuDeviceGetDefaultMemPool");
    if (dev < 0 || dev >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    *pool = &pools[dev];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    record("cuDeviceGetMemPool");
    if (dev < 0 || dev >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    *pool = &pools[dev];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    record("cuMemPoolCreate");
    if (!props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
        props->location.id >= n_devices)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    for (int i = MAX_DEVICES; i < MAX_POOLS; i++) {
        if (!pools[i].live) {
            pools[i] = (struct CUmemPoolHandle_st){.device = props->location.id, .live = 1};
            *pool = &pools[i];
            pthread_mutex_unlock(&pools_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&pools_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    record("cuMemPoolDestroy");
    if (!pool_valid(pool) || pool < pools + MAX_DEVICES) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    atomic_fetch_sub(&used[pool->device], pool->reserved); /* its live allocations go with it, as the driver's do */
    pool->live = 0;
    pthread_mutex_unlock(&pools_lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    record("cuMemPoolGetAttribute");
    if (!pool_valid(pool)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    uint64_t v = attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? pool->reserved
               : attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT      ? pool->used
               : attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD     ? pool->threshold
                                                                : UINT64_MAX;
    pthread_mutex_unlock(&pools_lock);
    if (v == UINT64_MAX && attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_INVALID_VALUE;
    *(cuuint64_t *)value = v;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    record("cuMemPoolSetAttribute");
    if (!pool_valid(pool) || attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    pool->threshold = *(cuuint64_t *)value;
    pthread_mutex_unlock(&pools_lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    record("cuMemPoolTrimTo");
    if (!pool_valid(pool)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pools_lock);
    pool_release_to(pool, keep);
    pthread_mutex_unlock(&pools_lock);
    return CUDA_SUCCESS;
}

#define ALLOC_FROM_POOL(name, params, pool) \
    EXPORT CUresult name params \
    { \
        record(#name); \
        if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT; \
        uint64_t key; \
        CUresult r = pool_take(pool, bytesize, &key); \
        if (r == CUDA_SUCCESS) *dptr = key; \
        return r; \
    }
ALLOC_FROM_POOL(cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream s), &pools[current_device()])
ALLOC_FROM_POOL(cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUstream s), &pools[current_device()])
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool p, CUstream s), p)
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool p, CUstream s), p)

#define ALLOC_CURRENT(name, params, size, out) \
    EXPORT CUresult name params \
    { \
        record(#name); \
        uint64_t key; \
        CUresult r = take(current_device(), size, &key); \
        if (r == CUDA_SUCCESS) *(out) = key; \
        return r; \
    }
ALLOC_CURRENT(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize), bytesize, dptr)
ALLOC_CURRENT(cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), bytesize, dptr)

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem)
{
    (void)elem;
    record("cuMemAllocPitch_v2");
    size_t padded = (width + 511) & ~(size_t)511;
    uint64_t key;
    CUresult r = take(current_device(), (uint64_t)padded * height, &key);
    if (r == CUDA_SUCCESS) *dptr = key, *pitch = padded;
    return r;
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    (void)flags;
    record("cuMemCreate");
    uint64_t key;
    CUresult r = take(prop->location.id, size, &key);
    if (r == CUDA_SUCCESS) *handle = key;
    return r;
}

static uint64_t array_size(size_t w, size_t h, size_t d, unsigned int channels)
{
    return (uint64_t)w * (h ? h : 1) * (d ? d : 1) * 4 * (channels ? channels : 1);
}

EXPORT CUresult cuArrayCreate_v2(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR *a)
{
    record("cuArrayCreate_v2");
    uint64_t key;
    CUresult r = take_array(current_device(), array_size(a->Width, a->Height, 1, a->NumChannels), a->Format,
                            a->NumChannels, &key);
    if (r == CUDA_SUCCESS) *handle = (CUarray)(uintptr_t)key;
    return r;
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR *a)
{
    record("cuArray3DCreate_v2");
    uint64_t key;
    CUresult r = take_array(current_device(), array_size(a->Width, a->Height, a->Depth, a->NumChannels), a->Format,
                            a->NumChannels, &key);
    if (r == CUDA_SUCCESS) *handle = (CUarray)(uintptr_t)key;
    return r;
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned int levels)
{
    record("cuMipmappedArrayCreate");
    uint64_t key;
    CUresult r = take(current_device(), array_size(a->Width, a->Height, a->Depth, a->NumChannels) * levels, &key);
    if (r == CUDA_SUCCESS) *handle = (CUmipmappedArray)(uintptr_t)key;
    return r;
}

#define FREE(name, params, key) \
    EXPORT CUresult name params \
    { \
        record(#name); \
        return give_back((uint64_t)(key)); \
    }
FREE(cuMemFree_v2, (CUdeviceptr dptr), dptr)
FREE(cuMemFreeAsync, (CUdeviceptr dptr, CUstream s), dptr)
FREE(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s), dptr)
FREE(cuMemRelease, (CUmemGenericAllocationHandle h), h)
FREE(cuArrayDestroy, (CUarray a), (uintptr_t)a)
FREE(cuMipmappedArrayDestroy, (CUmipmappedArray a), (uintptr_t)a)

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    record("cuMemGetInfo_v2");
    int dev = current_device();
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    *total = device_bytes;
    *free_bytes = device_bytes - used[dev];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    record("cuDeviceTotalMem_v2");
    if (dev < 0 || dev >= n_devices) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = device_bytes;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *desc, CUarray array)
{
    record("cuArray3DGetDescriptor_v2");
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&allocations_lock);
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocations[i].key && allocations[i].key == (uint64_t)(uintptr_t)array) {
            *desc = (CUDA_ARRAY3D_DESCRIPTOR){.Format = allocations[i].format, .NumChannels = allocations[i].channels};
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&allocations_lock);
    return r;
}

/* Virtual memory management: mapping is only bookkeeping here. */
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    (void)ptr, (void)size, (void)offset, (void)handle, (void)flags;
    record("cuMemMap");
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    (void)ptr, (void)size;
    record("cuMemUnmap");
    return CUDA_SUCCESS;
}

/* ---- copies: every entry point of the intercept's copy table ------------------ */

/* A copy moves nothing here; it is counted, refused when larger than a device, and takes FAKE_CUDA_COPY_NS. */
static CUresult copied(const char *name, uint64_t bytes)
{
    if (bare_launches) return CUDA_SUCCESS;
    record(name);
    if (bytes > device_bytes) return CUDA_ERROR_INVALID_VALUE;
    if (copy_ns) sleep_ns(copy_ns);
    return CUDA_SUCCESS;
}

static uint64_t batch_bytes(const size_t *sizes, size_t count)
{
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) total += sizes[i];
    return total;
}

static uint64_t batch_3d_bytes(const CUDA_MEMCPY3D_BATCH_OP *ops, size_t count)
{
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) total += (uint64_t)ops[i].extent.width * ops[i].extent.height * ops[i].extent.depth;
    return total;
}

/* The bytes each family copies, from its parameters (an array's element size aside). */
#define BYTES_UNIFIED ByteCount
#define BYTES_UNIFIED_ASYNC ByteCount
#define BYTES_PEER ByteCount
#define BYTES_PEER_ASYNC ByteCount
#define BYTES_HTOD ByteCount
#define BYTES_HTOD_ASYNC ByteCount
#define BYTES_DTOH ByteCount
#define BYTES_DTOH_ASYNC ByteCount
#define BYTES_DTOD ByteCount
#define BYTES_DTOD_ASYNC ByteCount
#define BYTES_DTOA ByteCount
#define BYTES_ATOD ByteCount
#define BYTES_HTOA ByteCount
#define BYTES_HTOA_ASYNC ByteCount
#define BYTES_ATOH ByteCount
#define BYTES_ATOH_ASYNC ByteCount
#define BYTES_ATOA ByteCount
#define BYTES_2D (uint64_t)pCopy->WidthInBytes * pCopy->Height
#define BYTES_2D_ASYNC BYTES_2D
#define BYTES_3D (uint64_t)pCopy->WidthInBytes * pCopy->Height * pCopy->Depth
#define BYTES_3D_ASYNC BYTES_3D
#define BYTES_3D_PEER BYTES_3D
#define BYTES_3D_PEER_ASYNC BYTES_3D
#define BYTES_BATCH_12080 batch_bytes(sizes, count)
#define BYTES_BATCH BYTES_BATCH_12080
#define BYTES_BATCH_3D_12080 batch_3d_bytes(opList, numOps)
#define BYTES_BATCH_3D BYTES_BATCH_3D_12080

#define FAKE_COPY(X, name, family, kind) \
    EXPORT CUresult name ALNAIR_COPY_##family##_PARAMS { return copied(#name, BYTES_##family); }
ALNAIR_COPY_HOOKS(FAKE_COPY, unused)

/* ---- waiting for the device ----------------------------------------------- */

#define SYNC(name, params) \
    EXPORT CUresult name params \
    { \
        record(#name); \
        pools_synchronized(); \
        return wait_for_queue(); \
    }

SYNC(cuCtxSynchronize, (void))
SYNC(cuCtxSynchronize_v2, (CUcontext ctx))
SYNC(cuStreamSynchronize, (CUstream s))
SYNC(cuStreamSynchronize_ptsz, (CUstream s))
SYNC(cuEventSynchronize, (CUevent e))

/* ---- cuGetProcAddress: the driver's own name resolution ------------------ */

CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

#define ENTRY(name) {#name, (void *)name},
static const struct {
    const char *name;
    void *fn;
} entries[] = {
    ENTRY(cuInit) ENTRY(cuDriverGetVersion) ENTRY(cuDeviceGetCount) ENTRY(cuDeviceGet) ENTRY(cuDeviceGetUuid_v2)
    ENTRY(cuDevicePrimaryCtxRetain) ENTRY(cuCtxSetCurrent) ENTRY(cuCtxGetCurrent) ENTRY(cuCtxGetDevice)
    ENTRY(cuCtxPushCurrent_v2) ENTRY(cuCtxPopCurrent_v2) ENTRY(cuCtxCreate_v2) ENTRY(cuCtxCreate_v4)
    ENTRY(cuCtxDestroy_v2) ENTRY(cuStreamGetCtx) ENTRY(cuStreamIsCapturing) ENTRY(cuStreamIsCapturing_ptsz) ENTRY(cuLaunchKernel) ENTRY(cuLaunchKernel_ptsz)
    ENTRY(cuLaunchKernelEx) ENTRY(cuLaunchKernelEx_ptsz) ENTRY(cuLaunchCooperativeKernel)
    ENTRY(cuLaunchCooperativeKernel_ptsz) ENTRY(cuLaunchCooperativeKernelMultiDevice) ENTRY(cuGraphLaunch)
    ENTRY(cuGraphLaunch_ptsz) ENTRY(cuMemAlloc_v2) ENTRY(cuMemAllocManaged) ENTRY(cuMemAllocAsync)
    ENTRY(cuMemAllocAsync_ptsz) ENTRY(cuMemAllocFromPoolAsync) ENTRY(cuMemAllocFromPoolAsync_ptsz)
    ENTRY(cuMemAllocPitch_v2) ENTRY(cuMemCreate) ENTRY(cuArrayCreate_v2) ENTRY(cuArray3DCreate_v2)
    ENTRY(cuMipmappedArrayCreate) ENTRY(cuMemFree_v2) ENTRY(cuMemFreeAsync) ENTRY(cuMemFreeAsync_ptsz)
    ENTRY(cuMemRelease) ENTRY(cuArrayDestroy) ENTRY(cuMipmappedArrayDestroy) ENTRY(cuMemGetInfo_v2)
    ENTRY(cuDeviceTotalMem_v2) ENTRY(cuGetProcAddress) ENTRY(cuGetProcAddress_v2) ENTRY(cuCtxSynchronize)
    ENTRY(cuCtxSynchronize_v2) ENTRY(cuStreamSynchronize) ENTRY(cuStreamSynchronize_ptsz) ENTRY(cuEventSynchronize)
    ENTRY(cuMemMap) ENTRY(cuMemUnmap) ENTRY(cuArray3DGetDescriptor_v2) ENTRY(cuDeviceGetDefaultMemPool)
    ENTRY(cuDeviceGetMemPool) ENTRY(cuMemPoolCreate) ENTRY(cuMemPoolDestroy) ENTRY(cuMemPoolGetAttribute)
    ENTRY(cuMemPoolSetAttribute) ENTRY(cuMemPoolTrimTo)
#define COPY_ENTRY(X, name, family, kind) ENTRY(name)
    ALNAIR_COPY_HOOKS(COPY_ENTRY, unused)
};

static void *entry(const char *name)
{
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (strcmp(entries[i].name, name) == 0) return entries[i].fn;
    return NULL;
}

/* The CUDA version that introduced a _vN name (most _v2 names came with 64-bit pointers in 3.2). */
static int introduced(const char *name, int default_since)
{
    static const struct {
        const char *name;
        int since;
    } late[] = {{"cuGetProcAddress_v2", 12000}, {"cuCtxSynchronize_v2", 13000}, {"cuMemcpyBatchAsync_v2", 13000},
                {"cuMemcpy3DBatchAsync_v2", 13000}};
    for (size_t i = 0; i < sizeof late / sizeof late[0]; i++)
        if (strcmp(name, late[i].name) == 0) return late[i].since;
    return default_since;
}

/* The newest _vN the version allows, and with per-thread-stream flags its _ptsz or _ptds form if there is one
 * (cuLaunchKernel_ptsz, cuMemcpyHtoD_v2_ptds, cuMemcpyBatchAsync_v2_ptsz). */
static void *resolve(const char *symbol, int version, cuuint64_t flags)
{
    static const struct {
        const char *suffix;
        int since;
    } versions[] = {{"_v4", 12050}, {"_v2", 3020}, {"", 0}};
    static const char *const per_thread[] = {"_ptsz", "_ptds"};
    char base[128], name[136];
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        snprintf(base, sizeof base, "%s%s", symbol, versions[i].suffix);
        if (version < introduced(base, versions[i].since)) continue;
        for (size_t p = 0; (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && p < 2; p++) {
            snprintf(name, sizeof name, "%s%s", base, per_thread[p]);
            if (entry(name)) return entry(name);
        }
        if (entry(base)) return entry(base);
    }
    return NULL;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *status)
{
    record("cuGetProcAddress_v2");
    *pfn = resolve(symbol, version, flags);
    if (status) *status = *pfn ? 0 : 1;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    record("cuGetProcAddress");
    *pfn = resolve(symbol, version, flags);
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
