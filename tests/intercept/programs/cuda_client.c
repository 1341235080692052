/*
 * cuda_client.c - a driver-API program for the intercept tests.
 *
 *   cuda_client LOOKUP SCENARIO [ARGS]
 *
 * LOOKUP is how it finds entry points: "gpa" (dlopen libcuda.so.1 and ask
 * cuGetProcAddress_v2 for every API by name, version and flags: what the CUDA
 * runtime does), "dlsym" (dlsym on the libcuda handle by exported name) or
 * "direct" (built with -DDIRECT_LINK against libcuda: plain calls).
 * Scenarios print "key value" lines, then "ready", then wait for stdin to close
 * so the test can read the segment of a live process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cuda_driver.h"

#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#define MIB (1ull << 20)

/* Every hooked entry point, with the query the runtime would make for it. */
#define ENTRY_POINTS(X) BASE_ENTRY_POINTS(X) COPY_ENTRY_POINTS(X)
#define BASE_ENTRY_POINTS(X) \
    X(cuLaunchKernel, "cuLaunchKernel", 13000, 0) X(cuLaunchKernel_ptsz, "cuLaunchKernel", 13000, PTDS) \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 13000, 0) X(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 13000, PTDS) \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 13000, 0) \
    X(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 13000, PTDS) \
    X(cuLaunchCooperativeKernelMultiDevice, "cuLaunchCooperativeKernelMultiDevice", 13000, 0) \
    X(cuGraphLaunch, "cuGraphLaunch", 13000, 0) X(cuGraphLaunch_ptsz, "cuGraphLaunch", 13000, PTDS) \
    X(cuMemAlloc_v2, "cuMemAlloc", 13000, 0) X(cuMemAllocPitch_v2, "cuMemAllocPitch", 13000, 0) \
    X(cuMemAllocManaged, "cuMemAllocManaged", 13000, 0) X(cuMemFree_v2, "cuMemFree", 13000, 0) \
    X(cuMemAllocAsync, "cuMemAllocAsync", 13000, 0) X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 13000, PTDS) \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 13000, 0) \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 13000, PTDS) \
    X(cuMemFreeAsync, "cuMemFreeAsync", 13000, 0) X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 13000, PTDS) \
    X(cuMemCreate, "cuMemCreate", 13000, 0) X(cuMemRelease, "cuMemRelease", 13000, 0) \
    X(cuArrayCreate_v2, "cuArrayCreate", 13000, 0) X(cuArray3DCreate_v2, "cuArray3DCreate", 13000, 0) \
    X(cuArrayDestroy, "cuArrayDestroy", 13000, 0) X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 13000, 0) \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 13000, 0) X(cuMemGetInfo_v2, "cuMemGetInfo", 13000, 0) \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 13000, 0) X(cuCtxSetCurrent, "cuCtxSetCurrent", 13000, 0) \
    X(cuCtxPushCurrent_v2, "cuCtxPushCurrent", 13000, 0) X(cuCtxPopCurrent_v2, "cuCtxPopCurrent", 13000, 0) \
    X(cuCtxCreate_v2, "cuCtxCreate", 12000, 0) X(cuCtxCreate_v4, "cuCtxCreate", 13000, 0) \
    X(cuCtxDestroy_v2, "cuCtxDestroy", 13000, 0) X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 13000, 0) \
    X(cuCtxSynchronize, "cuCtxSynchronize", 12000, 0) X(cuCtxSynchronize_v2, "cuCtxSynchronize", 13000, 0) \
    X(cuStreamSynchronize, "cuStreamSynchronize", 13000, 0) \
    X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 13000, PTDS) X(cuEventSynchronize, "cuEventSynchronize", 13000, 0) \
    X(cuGetProcAddress, "cuGetProcAddress", 11030, 0) X(cuGetProcAddress_v2, "cuGetProcAddress", 13000, 0) \
    X(cuMemMap, "cuMemMap", 13000, 0) X(cuMemUnmap, "cuMemUnmap", 13000, 0) \
    X(cuMemPoolCreate, "cuMemPoolCreate", 13000, 0) X(cuMemPoolDestroy, "cuMemPoolDestroy", 13000, 0)

/* The copies, with the query the runtime makes: the _ptds/_ptsz forms by flags, the 12.8 batches by version. */
#define COPY_ENTRY_POINTS(X) \
    X(cuMemcpy, "cuMemcpy", 13000, 0) X(cuMemcpy_ptds, "cuMemcpy", 13000, PTDS) \
    X(cuMemcpyAsync, "cuMemcpyAsync", 13000, 0) X(cuMemcpyAsync_ptsz, "cuMemcpyAsync", 13000, PTDS) \
    X(cuMemcpyPeer, "cuMemcpyPeer", 13000, 0) X(cuMemcpyPeer_ptds, "cuMemcpyPeer", 13000, PTDS) \
    X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 13000, 0) X(cuMemcpyPeerAsync_ptsz, "cuMemcpyPeerAsync", 13000, PTDS) \
    X(cuMemcpyHtoD_v2, "cuMemcpyHtoD", 13000, 0) X(cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD", 13000, PTDS) \
    X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync", 13000, 0) \
    X(cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync", 13000, PTDS) \
    X(cuMemcpyDtoH_v2, "cuMemcpyDtoH", 13000, 0) X(cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH", 13000, PTDS) \
    X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", 13000, 0) \
    X(cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync", 13000, PTDS) \
    X(cuMemcpyDtoD_v2, "cuMemcpyDtoD", 13000, 0) X(cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD", 13000, PTDS) \
    X(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync", 13000, 0) \
    X(cuMemcpyDtoDAsync_v2_ptsz, "cuMemcpyDtoDAsync", 13000, PTDS) \
    X(cuMemcpyDtoA_v2, "cuMemcpyDtoA", 13000, 0) X(cuMemcpyDtoA_v2_ptds, "cuMemcpyDtoA", 13000, PTDS) \
    X(cuMemcpyAtoD_v2, "cuMemcpyAtoD", 13000, 0) X(cuMemcpyAtoD_v2_ptds, "cuMemcpyAtoD", 13000, PTDS) \
    X(cuMemcpyHtoA_v2, "cuMemcpyHtoA", 13000, 0) X(cuMemcpyHtoA_v2_ptds, "cuMemcpyHtoA", 13000, PTDS) \
    X(cuMemcpyHtoAAsync_v2, "cuMemcpyHtoAAsync", 13000, 0) \
    X(cuMemcpyHtoAAsync_v2_ptsz, "cuMemcpyHtoAAsync", 13000, PTDS) \
    X(cuMemcpyAtoH_v2, "cuMemcpyAtoH", 13000, 0) X(cuMemcpyAtoH_v2_ptds, "cuMemcpyAtoH", 13000, PTDS) \
    X(cuMemcpyAtoHAsync_v2, "cuMemcpyAtoHAsync", 13000, 0) \
    X(cuMemcpyAtoHAsync_v2_ptsz, "cuMemcpyAtoHAsync", 13000, PTDS) \
    X(cuMemcpyAtoA_v2, "cuMemcpyAtoA", 13000, 0) X(cuMemcpyAtoA_v2_ptds, "cuMemcpyAtoA", 13000, PTDS) \
    X(cuMemcpy2D_v2, "cuMemcpy2D", 13000, 0) X(cuMemcpy2D_v2_ptds, "cuMemcpy2D", 13000, PTDS) \
    X(cuMemcpy2DUnaligned_v2, "cuMemcpy2DUnaligned", 13000, 0) \
    X(cuMemcpy2DUnaligned_v2_ptds, "cuMemcpy2DUnaligned", 13000, PTDS) \
    X(cuMemcpy2DAsync_v2, "cuMemcpy2DAsync", 13000, 0) X(cuMemcpy2DAsync_v2_ptsz, "cuMemcpy2DAsync", 13000, PTDS) \
    X(cuMemcpy3D_v2, "cuMemcpy3D", 13000, 0) X(cuMemcpy3D_v2_ptds, "cuMemcpy3D", 13000, PTDS) \
    X(cuMemcpy3DAsync_v2, "cuMemcpy3DAsync", 13000, 0) X(cuMemcpy3DAsync_v2_ptsz, "cuMemcpy3DAsync", 13000, PTDS) \
    X(cuMemcpy3DPeer, "cuMemcpy3DPeer", 13000, 0) X(cuMemcpy3DPeer_ptds, "cuMemcpy3DPeer", 13000, PTDS) \
    X(cuMemcpy3DPeerAsync, "cuMemcpy3DPeerAsync", 13000, 0) \
    X(cuMemcpy3DPeerAsync_ptsz, "cuMemcpy3DPeerAsync", 13000, PTDS) \
    X(cuMemcpyBatchAsync, "cuMemcpyBatchAsync", 12080, 0) X(cuMemcpyBatchAsync_ptsz, "cuMemcpyBatchAsync", 12080, PTDS) \
    X(cuMemcpyBatchAsync_v2, "cuMemcpyBatchAsync", 13000, 0) \
    X(cuMemcpyBatchAsync_v2_ptsz, "cuMemcpyBatchAsync", 13000, PTDS) \
    X(cuMemcpy3DBatchAsync, "cuMemcpy3DBatchAsync", 12080, 0) \
    X(cuMemcpy3DBatchAsync_ptsz, "cuMemcpy3DBatchAsync", 12080, PTDS) \
    X(cuMemcpy3DBatchAsync_v2, "cuMemcpy3DBatchAsync", 13000, 0) \
    X(cuMemcpy3DBatchAsync_v2_ptsz, "cuMemcpy3DBatchAsync", 13000, PTDS)

#define FN_TYPE(name, query, version, flags) typedef __typeof__(name) *name##_t;
#define DECLARE(name, params, args) CUresult name params;
ALNAIR_HOOKS(DECLARE)
CUresult cuInit(unsigned int flags);
ENTRY_POINTS(FN_TYPE)

struct api {
#define SLOT(name, query, version, flags) name##_t name;
    ENTRY_POINTS(SLOT)
    CUresult (*cuInit)(unsigned int);
};
static struct api cu;
static uint64_t (*driver_calls)(const char *);

static void *libcuda(void)
{
    static void *handle;
    if (!handle) handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) fprintf(stderr, "cannot load libcuda.so.1: %s\n", dlerror()), exit(3);
    return handle;
}

static void load(const char *lookup)
{
    void *h = libcuda();
    *(void **)&driver_calls = dlsym(h, "fake_cuda_calls");
    *(void **)&cu.cuInit = dlsym(h, "cuInit");
    if (!strcmp(lookup, "gpa")) {
        cuGetProcAddress_v2_t gpa = (cuGetProcAddress_v2_t)dlsym(h, "cuGetProcAddress_v2");
#define BY_GPA(name, query, version, flags) gpa(query, (void **)&cu.name, version, flags, NULL);
        ENTRY_POINTS(BY_GPA)
    } else if (!strcmp(lookup, "dlsym")) {
#define BY_DLSYM(name, query, version, flags) *(void **)&cu.name = dlsym(h, #name);
        ENTRY_POINTS(BY_DLSYM)
    } else {
#ifdef DIRECT_LINK
#define BY_LINK(name, query, version, flags) cu.name = name;
        ENTRY_POINTS(BY_LINK)
#else
        fprintf(stderr, "not built for direct linking\n"), exit(2);
#endif
    }
}

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) fprintf(stderr, "%s failed: %d\n", what, r), exit(4);
}

static void use_device(int dev)
{
    CUcontext ctx;
    check(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "retain");
    check(cu.cuCtxSetCurrent(ctx), "set current");
}

static void wait_for_stdin_close(void)
{
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
}

static CUresult launch(void) { return cu.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL); }

/* ---- scenario: launches from many threads ---------------------------------- */

struct launcher {
    int device;
    long count;
};

static void *launch_many(void *arg)
{
    struct launcher *l = arg;
    use_device(l->device);
    for (long i = 0; i < l->count; i++) check(launch(), "launch");
    return NULL;
}

static void scenario_launches(int threads, long per_thread, int devices)
{
    pthread_t t[256];
    struct launcher l[256];
    for (int i = 0; i < threads; i++) {
        l[i] = (struct launcher){i % devices, per_thread};
        pthread_create(&t[i], NULL, launch_many, &l[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (int d = 0; d < devices; d++) {
        long expected = 0;
        for (int i = 0; i < threads; i++) expected += l[i].device == d ? per_thread : 0;
        printf("launches %d %ld\n", d, expected);
    }
}

/* ---- scenario: kernels by name -------------------------------------------------- */

/* A kernel handle the fake driver names (fake_libcuda.c: the same FAKE_KERNEL_STRIDE, default 64). */
static CUfunction kernel(int k)
{
    const char *stride = getenv("FAKE_KERNEL_STRIDE");
    return (CUfunction)(uintptr_t)(0x100000u + (stride ? strtoul(stride, NULL, 10) : 64u) * (unsigned)k);
}

/* Kernel k on device k % devices, 1000 - 10 k times (k < 100), the most launched first, so the kernels named at
 * every publish are the most launched ones of the end; then `extra`, a comma-separated list, on device 0: k:N
 * launches kernel k N times, "wait" prints "waiting" and reads a line (the test looks at the record meanwhile). */
static void scenario_kernels(int kernels, int devices, const char *extra)
{
    for (int k = 0; k < kernels; k++) {
        use_device(k % devices);
        for (int i = 0; i < 1000 - 10 * k; i++)
            check(cu.cuLaunchKernel(kernel(k), 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), "launch");
    }
    use_device(0);
    for (const char *p = extra; p && *p;) {
        if (!strncmp(p, "wait", 4)) {
            char line[16];
            printf("waiting\n");
            if (!fgets(line, sizeof line, stdin)) exit(5);
        } else {
            int k = atoi(p), n = atoi(strchr(p, ':') + 1);
            for (int i = 0; i < n; i++)
                check(cu.cuLaunchKernel(kernel(k), 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), "launch");
        }
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
}

/* ---- scenario: interleaved allocation and free on several devices -------- */

static void scenario_memory(int rounds)
{
    uint64_t expected[3] = {0};
    CUdeviceptr live[3][64] = {{0}};
    uint64_t sizes[3][64] = {{0}};
    unsigned seed = 12345;
    for (int i = 0; i < rounds; i++) {
        int d = i % 3, slot = (int)((seed = seed * 1103515245 + 12345) >> 16) % 64;
        use_device(d);
        if (live[d][slot]) {
            check(i % 2 ? cu.cuMemFree_v2(live[d][slot]) : cu.cuMemFreeAsync(live[d][slot], NULL), "free");
            expected[d] -= sizes[d][slot];
            live[d][slot] = 0;
        } else {
            uint64_t size = ((seed >> 4) % 64 + 1) * MIB + (seed % 4096);
            check(i % 2 ? cu.cuMemAlloc_v2(&live[d][slot], size) : cu.cuMemAllocAsync(&live[d][slot], size, NULL),
                  "alloc");
            sizes[d][slot] = size;
            expected[d] += size;
        }
    }
    for (int d = 0; d < 3; d++) printf("bytes %d %llu\n", d, (unsigned long long)expected[d]);
}

/* ---- scenario: the memory limit ------------------------------------------ */

static _Atomic uint64_t granted;

static void *allocate_until_refused(void *arg)
{
    (void)arg;
    use_device(0);
    CUdeviceptr p;
    while (cu.cuMemAlloc_v2(&p, MIB) == CUDA_SUCCESS) granted += MIB;
    return NULL;
}

static void scenario_limit(int threads)
{
    use_device(0);
    size_t free_bytes, total, device_total;
    check(cu.cuMemGetInfo_v2(&free_bytes, &total), "mem info");
    check(cu.cuDeviceTotalMem_v2(&device_total, 0), "total mem");
    printf("reported_total %zu\nreported_free %zu\ndevice_total %zu\n", total, free_bytes, device_total);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, allocate_until_refused, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    CUdeviceptr p;
    printf("granted %llu\nrefused_result %d\n", (unsigned long long)granted, cu.cuMemAlloc_v2(&p, MIB));
}

/* ---- scenario: launch rate under a compute limit --------------------------- */

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void scenario_rate(double warmup, double seconds)
{
    use_device(0);
    double end = seconds_now() + warmup;
    while (seconds_now() < end) check(launch(), "launch");
    long n = 0;
    double start = seconds_now();
    for (end = start + seconds; seconds_now() < end; n++) check(launch(), "launch");
    printf("rate %.1f\n", n / (seconds_now() - start));
    /* the program never syncs: a sync the driver saw is the intercept's, draining before a launch waits */
    printf("driver_syncs %llu\n", (unsigned long long)driver_calls("cuStreamSynchronize"));
}

/* ---- scenario: batches of launches, each waited for (a deep queue) ---------- */

/* Prints the share of wall time the device spent on this process's work, from the
 * fake driver's time per launch (FAKE_CUDA_LAUNCH_NS, with FAKE_CUDA_ASYNC). */
static void scenario_batches(double warmup, double seconds, int batch)
{
    use_device(0);
    double launch_seconds = atof(getenv("FAKE_CUDA_LAUNCH_NS")) / 1e9;
    double end = seconds_now() + warmup;
    while (seconds_now() < end) {
        for (int i = 0; i < batch; i++) check(launch(), "launch");
        check(cu.cuCtxSynchronize(), "sync");
    }
    uint64_t (*outside)(void) = (uint64_t(*)(void))dlsym(libcuda(), "fake_cuda_outside_window_ns");
    uint64_t outside_before = outside ? outside() : 0;
    long n = 0;
    double start = seconds_now();
    for (end = start + seconds; seconds_now() < end; n += batch) {
        for (int i = 0; i < batch; i++) check(launch(), "launch");
        check(cu.cuCtxSynchronize(), "sync");
    }
    double elapsed = seconds_now() - start;
    printf("device_share %.3f\n", n * launch_seconds / elapsed);
    printf("batch_rate %.1f\n", n / batch / elapsed);
    /* with FAKE_CUDA_WINDOW_NS: how much of the work ran past the window */
    if (outside) printf("outside_window_share %.3f\n", (outside() - outside_before) / 1e9 / (n * launch_seconds));
}

/* ---- scenario: call every hooked entry point once -------------------------- */

#define WRAPPED(name, query, version, flags) \
    printf("wrapped %s %s\n", #name, \
           cu.name && dladdr((void *)cu.name, &info) && strstr(info.dli_fname, "libalnair") ? "yes" : "no");
#define DRIVER(name, query, version, flags) printf("driver %s %llu\n", #name, (unsigned long long)driver_calls(#name));

static void scenario_every_entry(void)
{
    Dl_info info;
    BASE_ENTRY_POINTS(WRAPPED)
    CUcontext c0, c1, c2, popped;
    check(cu.cuInit(0), "init");
    check(cu.cuDevicePrimaryCtxRetain(&c0, 0), "retain");
    check(cu.cuCtxSetCurrent(c0), "set");
    check(cu.cuCtxCreate_v2(&c1, 0, 1), "create v2");
    check(cu.cuCtxPopCurrent_v2(&popped), "pop");
    check(cu.cuCtxPushCurrent_v2(c1), "push");
    check(cu.cuCtxPopCurrent_v2(&popped), "pop");
    check(cu.cuCtxCreate_v4(&c2, NULL, 0, 2), "create v4");
    check(cu.cuCtxDestroy_v2(c2), "destroy");
    check(cu.cuCtxSetCurrent(c0), "set");

    CUlaunchConfig config = {.gridDimX = 1};
    check(cu.cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), "launch");
    check(cu.cuLaunchKernel_ptsz(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), "launch ptsz");
    check(cu.cuLaunchKernelEx(&config, NULL, NULL, NULL), "launch ex");
    check(cu.cuLaunchKernelEx_ptsz(&config, NULL, NULL, NULL), "launch ex ptsz");
    check(cu.cuLaunchCooperativeKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL), "coop");
    check(cu.cuLaunchCooperativeKernel_ptsz(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL), "coop ptsz");
    CUDA_LAUNCH_PARAMS multi[2] = {{.hStream = (CUstream)c0}, {.hStream = (CUstream)c1}};
    check(cu.cuLaunchCooperativeKernelMultiDevice(multi, 2, 0), "multi device");
    check(cu.cuGraphLaunch(NULL, NULL), "graph");
    check(cu.cuGraphLaunch_ptsz(NULL, NULL), "graph ptsz");
    check(cu.cuCtxSynchronize(), "ctx sync");
    check(cu.cuCtxSynchronize_v2(NULL), "ctx sync v2");
    check(cu.cuStreamSynchronize(NULL), "stream sync");
    check(cu.cuStreamSynchronize_ptsz(NULL), "stream sync ptsz");
    check(cu.cuEventSynchronize(NULL), "event sync");

    CUdeviceptr a, pitched, managed, async, async_ptsz, pool, pool_ptsz;
    size_t pitch;
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp prop = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUarray array, array3d;
    CUmipmappedArray mipmapped;
    CUDA_ARRAY_DESCRIPTOR desc = {64, 64, 0x20, 1};
    CUDA_ARRAY3D_DESCRIPTOR desc3d = {16, 16, 16, 0x20, 1, 0}, mip = {32, 32, 0, 0x20, 1, 0};
    check(cu.cuMemAlloc_v2(&a, 1 * MIB), "alloc");
    check(cu.cuMemAllocPitch_v2(&pitched, &pitch, 1000, 10, 4), "pitch");
    check(cu.cuMemAllocManaged(&managed, 2 * MIB, 1), "managed");
    check(cu.cuMemAllocAsync(&async, 3 * MIB, NULL), "async");
    check(cu.cuMemAllocAsync_ptsz(&async_ptsz, 4 * MIB, NULL), "async ptsz");
    CUmemPoolProps pool_props = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemoryPool custom, doomed;
    check(cu.cuMemPoolCreate(&custom, &pool_props), "pool create");
    check(cu.cuMemPoolCreate(&doomed, &pool_props), "pool create");
    check(cu.cuMemPoolDestroy(doomed), "pool destroy");
    check(cu.cuMemAllocFromPoolAsync(&pool, 5 * MIB, custom, NULL), "pool");
    check(cu.cuMemAllocFromPoolAsync_ptsz(&pool_ptsz, 6 * MIB, custom, NULL), "pool ptsz");
    check(cu.cuMemCreate(&handle, 8 * MIB, &prop, 0), "create");
    check(cu.cuMemMap(0x300000000000ull, 8 * MIB, 0, handle, 0), "map");
    check(cu.cuMemUnmap(0x300000000000ull, 8 * MIB), "unmap");
    check(cu.cuArrayCreate_v2(&array, &desc), "array");
    check(cu.cuArray3DCreate_v2(&array3d, &desc3d), "array 3d");
    check(cu.cuMipmappedArrayCreate(&mipmapped, &mip, 2), "mipmapped");
    check(cu.cuMemFree_v2(a), "free");
    check(cu.cuMemFreeAsync(async, NULL), "free async");
    check(cu.cuMemFreeAsync_ptsz(async_ptsz, NULL), "free async ptsz");
    check(cu.cuMemRelease(handle), "release");
    check(cu.cuArrayDestroy(array), "array destroy");
    check(cu.cuMipmappedArrayDestroy(mipmapped), "mipmapped destroy");
    size_t free_bytes, total;
    check(cu.cuMemGetInfo_v2(&free_bytes, &total), "mem info");
    check(cu.cuDeviceTotalMem_v2(&total, 0), "total");
    void *fn;
    check(cu.cuGetProcAddress("cuInit", &fn, 11030, 0), "gpa v1");
    check(cu.cuGetProcAddress_v2("cuInit", &fn, 13000, 0, NULL), "gpa v2");
    printf("bytes 0 %llu\n", (unsigned long long)(pitch * 10 + 2 * MIB + 5 * MIB + 6 * MIB + 16 * 16 * 16 * 4));
    BASE_ENTRY_POINTS(DRIVER)
}

/* ---- scenario: every copy entry point, each end of each kind ------------------ */

/* What a copy should count as: "copy NAME DEVICE DIRECTION BYTES SYNC", DIRECTION one of h2d d2h d2d, or
 * none (not counted). Each call copies a size of its own, so any mix-up shows in the sums. */
static size_t next_size = 4096;

static size_t expect(const char *name, int device, const char *direction, int sync)
{
    next_size += 64;
    printf("copy %s %d %s %zu %d\n", name, device, direction, next_size, sync);
    return next_size;
}

static CUdeviceptr allocate_on(int device, size_t bytes)
{
    CUdeviceptr p;
    use_device(device);
    check(cu.cuMemAlloc_v2(&p, bytes), "alloc");
    return p;
}

static CUcontext context_of(int device)
{
    CUcontext ctx;
    check(cu.cuDevicePrimaryCtxRetain(&ctx, device), "retain");
    return ctx;
}

#define UNKNOWN_DEVICE_POINTER 0x200000000000ull /* device memory this process did not allocate (imported) */
#define VMM_RANGE 0x300000000000ull             /* where a cuMemCreate handle is mapped */
#define MEMCPY2D(dst_type, dst, src_type, src, w, h) \
    (CUDA_MEMCPY2D){.srcMemoryType = src_type, .srcDevice = src, .srcHost = (void *)(uintptr_t)src, \
                    .srcArray = array, .dstMemoryType = dst_type, .dstDevice = dst, .dstHost = (void *)(uintptr_t)dst, \
                    .dstArray = array, .WidthInBytes = w, .Height = h}
#define MEMCPY3D(dst_type, dst, src_type, src, w) \
    (CUDA_MEMCPY3D){.srcMemoryType = src_type, .srcDevice = src, .srcHost = (void *)(uintptr_t)src, \
                    .srcArray = array, .dstMemoryType = dst_type, .dstDevice = dst, .dstHost = (void *)(uintptr_t)dst, \
                    .dstArray = array, .WidthInBytes = w, .Height = 2, .Depth = 4}
#define PEER3D(dst_type, dst, dst_ctx, src_type, src, src_ctx, w) \
    (CUDA_MEMCPY3D_PEER){.srcMemoryType = src_type, .srcDevice = src, .srcHost = (void *)(uintptr_t)src, \
                         .srcContext = src_ctx, .dstMemoryType = dst_type, .dstDevice = dst, \
                         .dstHost = (void *)(uintptr_t)dst, .dstContext = dst_ctx, .WidthInBytes = w, .Height = 2, \
                         .Depth = 4}

static CUmemcpy3DOperand pointer_operand(CUdeviceptr p)
{
    return (CUmemcpy3DOperand){.type = CU_MEMCPY_OPERAND_TYPE_POINTER, .op.ptr.ptr = p};
}

static CUmemcpy3DOperand array_operand(CUarray a)
{
    return (CUmemcpy3DOperand){.type = CU_MEMCPY_OPERAND_TYPE_ARRAY, .op.array.array = a};
}

static void scenario_copies(void)
{
    Dl_info info;
    COPY_ENTRY_POINTS(WRAPPED)
    static char host_buffer[64 << 10], other_host[64 << 10];
    CUdeviceptr host = (CUdeviceptr)(uintptr_t)host_buffer, host2 = (CUdeviceptr)(uintptr_t)other_host;
    CUdeviceptr d0 = allocate_on(0, 8 * MIB) + 4096, d1 = allocate_on(1, 8 * MIB), d2 = allocate_on(2, 8 * MIB);
    CUcontext c0 = context_of(0), c1 = context_of(1), c2 = context_of(2);
    CUarray array; /* on device 3: array ends count on the calling thread's device */
    CUDA_ARRAY_DESCRIPTOR floats = {64, 64, 0x20, 1};
    use_device(3);
    check(cu.cuArrayCreate_v2(&array, &floats), "array");
    use_device(0);
    size_t n;

    /* unified: the pointers decide, an interior pointer too */
    n = expect("cuMemcpy", 0, "h2d", 1), check(cu.cuMemcpy(d0 + 100, host, n), "cuMemcpy");
    n = expect("cuMemcpy", 2, "d2d", 1), check(cu.cuMemcpy(d2, d1, n), "cuMemcpy");
    n = expect("cuMemcpy", 0, "none", 1), check(cu.cuMemcpy(host, host2, n), "cuMemcpy");
    n = expect("cuMemcpy_ptds", 1, "d2h", 1), check(cu.cuMemcpy_ptds(host, d1, n), "cuMemcpy_ptds");
    n = expect("cuMemcpyAsync", 1, "h2d", 0), check(cu.cuMemcpyAsync(d1, host, n, NULL), "cuMemcpyAsync");
    n = expect("cuMemcpyAsync_ptsz", 0, "d2h", 0), check(cu.cuMemcpyAsync_ptsz(host, d0, n, NULL), "async ptsz");
    /* peer: the destination's device, from its pointer, else its context */
    n = expect("cuMemcpyPeer", 2, "d2d", 1), check(cu.cuMemcpyPeer(d2, c2, d1, c1, n), "peer");
    n = expect("cuMemcpyPeer_ptds", 1, "d2d", 1);
    check(cu.cuMemcpyPeer_ptds(UNKNOWN_DEVICE_POINTER, c1, d0, c0, n), "peer ptds");
    n = expect("cuMemcpyPeerAsync", 0, "d2d", 0), check(cu.cuMemcpyPeerAsync(d0, c0, d2, c2, n, NULL), "peer async");
    n = expect("cuMemcpyPeerAsync_ptsz", 2, "d2d", 0);
    check(cu.cuMemcpyPeerAsync_ptsz(d2, c2, d0, c0, n, NULL), "peer async ptsz");
    /* named directions: the device end's device, else the thread's */
    n = expect("cuMemcpyHtoD_v2", 2, "h2d", 1), check(cu.cuMemcpyHtoD_v2(d2, host_buffer, n), "htod");
    n = expect("cuMemcpyHtoD_v2_ptds", 0, "h2d", 1);
    check(cu.cuMemcpyHtoD_v2_ptds(UNKNOWN_DEVICE_POINTER, host_buffer, n), "htod ptds");
    n = expect("cuMemcpyHtoDAsync_v2", 1, "h2d", 0), check(cu.cuMemcpyHtoDAsync_v2(d1, host_buffer, n, NULL), "htod a");
    n = expect("cuMemcpyHtoDAsync_v2_ptsz", 0, "h2d", 0);
    check(cu.cuMemcpyHtoDAsync_v2_ptsz(d0, host_buffer, n, NULL), "htod async ptsz");
    n = expect("cuMemcpyDtoH_v2", 1, "d2h", 1), check(cu.cuMemcpyDtoH_v2(host_buffer, d1, n), "dtoh");
    n = expect("cuMemcpyDtoH_v2_ptds", 2, "d2h", 1), check(cu.cuMemcpyDtoH_v2_ptds(host_buffer, d2, n), "dtoh ptds");
    n = expect("cuMemcpyDtoHAsync_v2", 0, "d2h", 0), check(cu.cuMemcpyDtoHAsync_v2(host_buffer, d0, n, NULL), "dtoh a");
    n = expect("cuMemcpyDtoHAsync_v2_ptsz", 1, "d2h", 0);
    check(cu.cuMemcpyDtoHAsync_v2_ptsz(host_buffer, d1, n, NULL), "dtoh async ptsz");
    n = expect("cuMemcpyDtoD_v2", 1, "d2d", 1), check(cu.cuMemcpyDtoD_v2(d1, d2, n), "dtod");
    n = expect("cuMemcpyDtoD_v2_ptds", 2, "d2d", 1), check(cu.cuMemcpyDtoD_v2_ptds(d2, d0, n), "dtod ptds");
    n = expect("cuMemcpyDtoDAsync_v2", 0, "d2d", 0), check(cu.cuMemcpyDtoDAsync_v2(d0, d1, n, NULL), "dtod async");
    n = expect("cuMemcpyDtoDAsync_v2_ptsz", 2, "d2d", 0);
    check(cu.cuMemcpyDtoDAsync_v2_ptsz(UNKNOWN_DEVICE_POINTER, d2, n, NULL), "dtod async ptsz");
    n = expect("cuMemcpyDtoA_v2", 2, "d2d", 1), check(cu.cuMemcpyDtoA_v2(array, 0, d2, n), "dtoa");
    n = expect("cuMemcpyAtoD_v2", 1, "d2d", 1), check(cu.cuMemcpyAtoD_v2(d1, array, 0, n), "atod");
    use_device(3); /* array to and from host: the thread's device */
    n = expect("cuMemcpyDtoA_v2_ptds", 3, "d2d", 1);
    check(cu.cuMemcpyDtoA_v2_ptds(array, 0, UNKNOWN_DEVICE_POINTER, n), "dtoa ptds");
    n = expect("cuMemcpyAtoD_v2_ptds", 0, "d2d", 1), check(cu.cuMemcpyAtoD_v2_ptds(d0, array, 0, n), "atod ptds");
    n = expect("cuMemcpyHtoA_v2", 3, "h2d", 1), check(cu.cuMemcpyHtoA_v2(array, 0, host_buffer, n), "htoa");
    n = expect("cuMemcpyHtoA_v2_ptds", 3, "h2d", 1), check(cu.cuMemcpyHtoA_v2_ptds(array, 0, host_buffer, n), "htoa p");
    n = expect("cuMemcpyHtoAAsync_v2", 3, "h2d", 0);
    check(cu.cuMemcpyHtoAAsync_v2(array, 0, host_buffer, n, NULL), "htoa async");
    n = expect("cuMemcpyHtoAAsync_v2_ptsz", 3, "h2d", 0);
    check(cu.cuMemcpyHtoAAsync_v2_ptsz(array, 0, host_buffer, n, NULL), "htoa async ptsz");
    n = expect("cuMemcpyAtoH_v2", 3, "d2h", 1), check(cu.cuMemcpyAtoH_v2(host_buffer, array, 0, n), "atoh");
    n = expect("cuMemcpyAtoH_v2_ptds", 3, "d2h", 1), check(cu.cuMemcpyAtoH_v2_ptds(host_buffer, array, 0, n), "atoh p");
    n = expect("cuMemcpyAtoHAsync_v2", 3, "d2h", 0);
    check(cu.cuMemcpyAtoHAsync_v2(host_buffer, array, 0, n, NULL), "atoh async");
    n = expect("cuMemcpyAtoHAsync_v2_ptsz", 3, "d2h", 0);
    check(cu.cuMemcpyAtoHAsync_v2_ptsz(host_buffer, array, 0, n, NULL), "atoh async ptsz");
    n = expect("cuMemcpyAtoA_v2", 3, "d2d", 1), check(cu.cuMemcpyAtoA_v2(array, 0, array, 64, n), "atoa");
    n = expect("cuMemcpyAtoA_v2_ptds", 3, "d2d", 1), check(cu.cuMemcpyAtoA_v2_ptds(array, 0, array, 64, n), "atoa p");

    /* 2D and 3D: each memory type at each end; bytes are width x height (x depth) */
    CUDA_MEMCPY2D c2d;
    n = expect("cuMemcpy2D_v2", 1, "h2d", 1) / 4;
    c2d = MEMCPY2D(CU_MEMORYTYPE_DEVICE, d1, CU_MEMORYTYPE_HOST, host, n, 4), check(cu.cuMemcpy2D_v2(&c2d), "2d");
    n = expect("cuMemcpy2D_v2_ptds", 0, "d2h", 1) / 4;
    c2d = MEMCPY2D(CU_MEMORYTYPE_HOST, host, CU_MEMORYTYPE_DEVICE, d0, n, 4), check(cu.cuMemcpy2D_v2_ptds(&c2d), "2d p");
    n = expect("cuMemcpy2DUnaligned_v2", 2, "d2h", 1) / 4;
    c2d = MEMCPY2D(CU_MEMORYTYPE_UNIFIED, host, CU_MEMORYTYPE_UNIFIED, d2, n, 4);
    check(cu.cuMemcpy2DUnaligned_v2(&c2d), "2d unaligned");
    n = expect("cuMemcpy2DUnaligned_v2_ptds", 1, "d2d", 1) / 4;
    c2d = MEMCPY2D(CU_MEMORYTYPE_DEVICE, d1, CU_MEMORYTYPE_ARRAY, 0, n, 4);
    check(cu.cuMemcpy2DUnaligned_v2_ptds(&c2d), "2d unaligned ptds");
    n = expect("cuMemcpy2DAsync_v2", 3, "h2d", 0) / 4;
    c2d = MEMCPY2D(CU_MEMORYTYPE_ARRAY, 0, CU_MEMORYTYPE_HOST, host, n, 4), check(cu.cuMemcpy2DAsync_v2(&c2d, NULL), "2d a");
    n = expect("cuMemcpy2DAsync_v2_ptsz", 0, "none", 0) / 4;
    c2d = MEMCPY2D(CU_MEMORYTYPE_UNIFIED, host, CU_MEMORYTYPE_UNIFIED, host2, n, 4);
    check(cu.cuMemcpy2DAsync_v2_ptsz(&c2d, NULL), "2d async ptsz");
    CUDA_MEMCPY3D c3d;
    n = expect("cuMemcpy3D_v2", 2, "h2d", 1) / 8;
    c3d = MEMCPY3D(CU_MEMORYTYPE_DEVICE, d2, CU_MEMORYTYPE_HOST, host, n), check(cu.cuMemcpy3D_v2(&c3d), "3d");
    n = expect("cuMemcpy3D_v2_ptds", 0, "d2d", 1) / 8;
    c3d = MEMCPY3D(CU_MEMORYTYPE_DEVICE, d0, CU_MEMORYTYPE_DEVICE, d1, n), check(cu.cuMemcpy3D_v2_ptds(&c3d), "3d p");
    n = expect("cuMemcpy3DAsync_v2", 0, "d2h", 0) / 8;
    c3d = MEMCPY3D(CU_MEMORYTYPE_HOST, host, CU_MEMORYTYPE_UNIFIED, d0, n), check(cu.cuMemcpy3DAsync_v2(&c3d, NULL), "3d a");
    n = expect("cuMemcpy3DAsync_v2_ptsz", 3, "d2h", 0) / 8;
    c3d = MEMCPY3D(CU_MEMORYTYPE_HOST, host, CU_MEMORYTYPE_ARRAY, 0, n);
    check(cu.cuMemcpy3DAsync_v2_ptsz(&c3d, NULL), "3d async ptsz");
    CUDA_MEMCPY3D_PEER p3d;
    n = expect("cuMemcpy3DPeer", 2, "d2d", 1) / 8;
    p3d = PEER3D(CU_MEMORYTYPE_DEVICE, UNKNOWN_DEVICE_POINTER, c2, CU_MEMORYTYPE_DEVICE, d1, c1, n);
    check(cu.cuMemcpy3DPeer(&p3d), "3d peer");
    n = expect("cuMemcpy3DPeer_ptds", 1, "h2d", 1) / 8;
    p3d = PEER3D(CU_MEMORYTYPE_DEVICE, d1, c1, CU_MEMORYTYPE_HOST, host, NULL, n);
    check(cu.cuMemcpy3DPeer_ptds(&p3d), "3d peer ptds");
    n = expect("cuMemcpy3DPeerAsync", 0, "d2h", 0) / 8;
    p3d = PEER3D(CU_MEMORYTYPE_HOST, host, NULL, CU_MEMORYTYPE_DEVICE, d0, c0, n);
    check(cu.cuMemcpy3DPeerAsync(&p3d, NULL), "3d peer async");
    n = expect("cuMemcpy3DPeerAsync_ptsz", 1, "d2d", 0) / 8;
    p3d = PEER3D(CU_MEMORYTYPE_DEVICE, d1, c1, CU_MEMORYTYPE_DEVICE, d2, c2, n);
    check(cu.cuMemcpy3DPeerAsync_ptsz(&p3d, NULL), "3d peer async ptsz");

    /* batches: each copy by its pointers; a 3D batch's array operand by its element size (4-byte floats) */
    CUdeviceptr dsts[3], srcs[3];
    size_t sizes[3], fail = 0;
    dsts[0] = d0, srcs[0] = host, sizes[0] = expect("cuMemcpyBatchAsync", 0, "h2d", 0);
    dsts[1] = host, srcs[1] = d1, sizes[1] = expect("cuMemcpyBatchAsync", 1, "d2h", 0);
    dsts[2] = d0, srcs[2] = d2, sizes[2] = expect("cuMemcpyBatchAsync", 0, "d2d", 0);
    check(cu.cuMemcpyBatchAsync(dsts, srcs, sizes, 3, NULL, NULL, 0, &fail, NULL), "batch");
    dsts[0] = d2, srcs[0] = d1, sizes[0] = expect("cuMemcpyBatchAsync_ptsz", 2, "d2d", 0);
    check(cu.cuMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 1, NULL, NULL, 0, &fail, NULL), "batch ptsz");
    dsts[0] = d2, srcs[0] = host, sizes[0] = expect("cuMemcpyBatchAsync_v2", 2, "h2d", 0);
    dsts[1] = host, srcs[1] = host2, sizes[1] = expect("cuMemcpyBatchAsync_v2", 0, "none", 0);
    check(cu.cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, NULL, NULL, 0, NULL), "batch v2");
    dsts[0] = host, srcs[0] = d0, sizes[0] = expect("cuMemcpyBatchAsync_v2_ptsz", 0, "d2h", 0);
    check(cu.cuMemcpyBatchAsync_v2_ptsz(dsts, srcs, sizes, 1, NULL, NULL, 0, NULL), "batch v2 ptsz");
    CUDA_MEMCPY3D_BATCH_OP ops[2];
    n = expect("cuMemcpy3DBatchAsync", 1, "h2d", 0) / 8;
    ops[0] = (CUDA_MEMCPY3D_BATCH_OP){pointer_operand(host), pointer_operand(d1), {n, 4, 2}, 1, 0};
    n = expect("cuMemcpy3DBatchAsync", 3, "d2h", 0) / 32;
    ops[1] = (CUDA_MEMCPY3D_BATCH_OP){array_operand(array), pointer_operand(host), {n, 4, 2}, 1, 0};
    check(cu.cuMemcpy3DBatchAsync(2, ops, &fail, 0, NULL), "3d batch");
    n = expect("cuMemcpy3DBatchAsync_ptsz", 3, "d2d", 0) / 32;
    ops[0] = (CUDA_MEMCPY3D_BATCH_OP){pointer_operand(d0), array_operand(array), {n, 4, 2}, 1, 0};
    check(cu.cuMemcpy3DBatchAsync_ptsz(1, ops, &fail, 0, NULL), "3d batch ptsz");
    n = expect("cuMemcpy3DBatchAsync_v2", 2, "d2h", 0) / 8;
    ops[0] = (CUDA_MEMCPY3D_BATCH_OP){pointer_operand(d2), pointer_operand(host), {n, 4, 2}, 1, 0};
    check(cu.cuMemcpy3DBatchAsync_v2(1, ops, 0, NULL), "3d batch v2");
    n = expect("cuMemcpy3DBatchAsync_v2_ptsz", 0, "none", 0) / 8;
    ops[0] = (CUDA_MEMCPY3D_BATCH_OP){pointer_operand(host), pointer_operand(host2), {n, 4, 2}, 1, 0};
    check(cu.cuMemcpy3DBatchAsync_v2_ptsz(1, ops, 0, NULL), "3d batch v2 ptsz");

    /* a mapped virtual memory range is device memory until unmapped; a freed allocation is not */
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp on_device2 = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 2}};
    use_device(0);
    check(cu.cuMemCreate(&handle, 4 * MIB, &on_device2, 0), "create");
    check(cu.cuMemMap(VMM_RANGE, 4 * MIB, 0, handle, 0), "map");
    n = expect("cuMemcpy", 2, "h2d", 1), check(cu.cuMemcpy(VMM_RANGE + 3 * MIB, host, n), "to the mapping");
    check(cu.cuMemUnmap(VMM_RANGE, 4 * MIB), "unmap");
    n = expect("cuMemcpy", 0, "none", 1), check(cu.cuMemcpy(VMM_RANGE, host, n), "to where it was mapped");
    CUdeviceptr small1 = allocate_on(1, 64 << 10), small2 = allocate_on(1, 64 << 10);
    check(cu.cuMemFree_v2(small1), "free");
    n = expect("cuMemcpyAsync", 1, "h2d", 0), check(cu.cuMemcpyAsync(small2, host, n, NULL), "beside a freed one");
    CUdeviceptr gone = allocate_on(2, 4 * MIB);
    check(cu.cuMemFree_v2(gone), "free");
    n = expect("cuMemcpyAsync", 0, "none", 0), check(cu.cuMemcpyAsync(gone, host, n, NULL), "to freed memory");

    /* refused by the driver: not counted */
    printf("refused cuMemcpyHtoD_v2 %d\n", cu.cuMemcpyHtoD_v2(d0, host_buffer, (size_t)1 << 62));
    printf("refused cuMemcpyBatchAsync_v2 %d\n",
           (sizes[0] = (size_t)1 << 62, cu.cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 1, NULL, NULL, 0, NULL)));
    COPY_ENTRY_POINTS(DRIVER)
}

/* ---- scenario: activity times ---------------------------------------------------- */

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Nanoseconds since this process started, reckoned as the intercept reckons them. */
static uint64_t since_start(void)
{
    char stat[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(stat, 1, sizeof stat - 1, f) : 0;
    if (f) fclose(f);
    stat[n] = '\0';
    char *p = strrchr(stat, ')');
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    uint64_t start = p ? strtoull(p + 1, NULL, 10) * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK)) : 0;
    return clock_ns(CLOCK_BOOTTIME) - start;
}

static void wait_for_line(void)
{
    printf("ready\n");
    char c;
    while (read(0, &c, 1) == 1 && c != '\n') {
    }
}

/* Allocates, then (on a line from stdin) launches, then (on another) launches again, printing the
 * bounds of each event: since-start times and, for launches, CLOCK_REALTIME. */
static void scenario_activity(void)
{
    CUdeviceptr p;
    use_device(0);
    usleep(100000);
    printf("before_allocation %llu\n", (unsigned long long)since_start());
    check(cu.cuMemAlloc_v2(&p, MIB), "alloc");
    printf("after_allocation %llu\n", (unsigned long long)since_start());
    wait_for_line();
    for (int round = 1; round <= 2; round++) {
        printf("before_launch %llu\nbefore_launch_realtime %llu\n", (unsigned long long)since_start(),
               (unsigned long long)clock_ns(CLOCK_REALTIME));
        check(launch(), "launch");
        printf("after_launch %llu\n", (unsigned long long)since_start());
        if (round == 1) wait_for_line();
    }
}

/* ---- scenario: stream-ordered pools ------------------------------------------ */

typedef CUresult (*pool_get_fn)(CUmemoryPool *, CUdevice);
typedef CUresult (*pool_attr_fn)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*pool_trim_fn)(CUmemoryPool, size_t);

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
    pool_attr_fn get = (pool_attr_fn)dlsym(libcuda(), "cuMemPoolGetAttribute");
    cuuint64_t v = 0;
    check(get(pool, attr, &v), "pool attribute");
    return v;
}

/* Phase 1: a cache in the default pool and in a created one; phase 2 (next line): 1 MiB allocations until
 * the limit refuses one; phase 3 (next line): every default-pool allocation freed, the pool trimmed. */
static void scenario_pools(void)
{
    use_device(0);
    CUmemoryPool dflt, custom;
    check(((pool_get_fn)dlsym(libcuda(), "cuDeviceGetDefaultMemPool"))(&dflt, 0), "default pool");
    cuuint64_t keep_all = UINT64_MAX;
    pool_attr_fn set = (pool_attr_fn)dlsym(libcuda(), "cuMemPoolSetAttribute");
    check(set(dflt, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all), "threshold");
    CUmemPoolProps props = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    check(cu.cuMemPoolCreate(&custom, &props), "pool create");
    check(set(custom, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all), "threshold");
    static CUdeviceptr blocks[4096];
    int n = 0;
    for (int i = 0; i < 4; i++) check(cu.cuMemAllocAsync(&blocks[n++], 8 * MIB, NULL), "async");
    check(cu.cuMemFreeAsync(blocks[--n], NULL), "free async");
    check(cu.cuMemFreeAsync(blocks[--n], NULL), "free async");
    CUdeviceptr c1, c2;
    check(cu.cuMemAllocFromPoolAsync(&c1, 3 * MIB, custom, NULL), "from pool");
    check(cu.cuMemAllocFromPoolAsync(&c2, 3 * MIB, custom, NULL), "from pool");
    check(cu.cuMemFreeAsync(c2, NULL), "free async");
    check(cu.cuStreamSynchronize(NULL), "sync"); /* release thresholds keep everything */
#define RESERVED() (pool_attr(dflt, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) + pool_attr(custom, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT))
#define USED() (pool_attr(dflt, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) + pool_attr(custom, CU_MEMPOOL_ATTR_USED_MEM_CURRENT))
    printf("allocated %llu\nreserved %llu\nused %llu\n", 19 * MIB, (unsigned long long)RESERVED(),
           (unsigned long long)USED());
    wait_for_line();

    uint64_t custom_before = pool_attr(custom, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), most = 0;
    long granted = 0;
    CUresult r;
    while (n < 4096 && (r = cu.cuMemAllocAsync(&blocks[n], MIB, NULL)) == CUDA_SUCCESS) {
        n++, granted++;
        uint64_t now = RESERVED();
        if (now > most) most = now;
    }
    printf("granted %ld\nrefused_result %d\nmost_reserved %llu\nreserved %llu\n", granted, r,
           (unsigned long long)most, (unsigned long long)RESERVED());
    printf("custom_before %llu\ncustom_after %llu\n", (unsigned long long)custom_before,
           (unsigned long long)pool_attr(custom, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    wait_for_line();

    while (n) check(cu.cuMemFreeAsync(blocks[--n], NULL), "free async");
    check(((pool_trim_fn)dlsym(libcuda(), "cuMemPoolTrimTo"))(dflt, 0), "trim");
    printf("reserved %llu\nused %llu\n", (unsigned long long)RESERVED(), (unsigned long long)USED());
}

/* At the limit with the default pool keeping what is freed: 1 MiB allocations until one is refused, then two
 * of them freed (their memory stays in the pool) and asked for again as 1 MiB and as 8,000 bytes: both fit in
 * what the pool holds, so the limit must not refuse either. */
static void scenario_pool_refill(void)
{
    use_device(0);
    CUmemoryPool dflt;
    check(((pool_get_fn)dlsym(libcuda(), "cuDeviceGetDefaultMemPool"))(&dflt, 0), "default pool");
    cuuint64_t keep_all = UINT64_MAX;
    check(((pool_attr_fn)dlsym(libcuda(), "cuMemPoolSetAttribute"))(dflt, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                                                      &keep_all), "threshold");
    static CUdeviceptr blocks[4096];
    int n = 0;
    CUresult r;
    while (n < 4094 && (r = cu.cuMemAllocAsync(&blocks[n], MIB, NULL)) == CUDA_SUCCESS) n++;
    printf("granted %d\nrefused_result %d\n", n, r);
    check(cu.cuMemFreeAsync(blocks[--n], NULL), "free async");
    check(cu.cuMemFreeAsync(blocks[--n], NULL), "free async");
    uint64_t reserved = pool_attr(dflt, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    printf("again_result %d\n", cu.cuMemAllocAsync(&blocks[n++], MIB, NULL));
    printf("small_result %d\n", cu.cuMemAllocAsync(&blocks[n++], 8000, NULL));
    printf("reserved_before %llu\nreserved_after %llu\n", (unsigned long long)reserved,
           (unsigned long long)pool_attr(dflt, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    wait_for_line();
}

/* Contexts holding FAKE_CUDA_CONTEXT_BYTES each: the primary one of device 0, two created on device 1;
 * on a line from stdin, one of those is destroyed. */
static void scenario_contexts(void)
{
    CUcontext a, b, popped;
    use_device(0);
    check(cu.cuCtxCreate_v2(&a, 0, 1), "create");
    check(cu.cuCtxCreate_v4(&b, NULL, 0, 1), "create v4");
    check(launch(), "launch"); /* on b, the current context */
    check(cu.cuCtxPopCurrent_v2(&popped), "pop");
    check(cu.cuCtxPopCurrent_v2(&popped), "pop");
    check(launch(), "launch"); /* back on device 0 */
    size_t free_bytes, total;
    check(cu.cuMemGetInfo_v2(&free_bytes, &total), "mem info");
    printf("reported_free %zu\nreported_total %zu\n", free_bytes, total);
    wait_for_line();
    check(cu.cuCtxDestroy_v2(b), "destroy");
}

/* ---- scenario: fork ---------------------------------------------------------- */

static void scenario_fork(void)
{
    use_device(0);
    for (int i = 0; i < 5; i++) check(launch(), "launch");
    pid_t child = fork();
    if (child == 0) {
        usleep(50000); /* the child's first launch comes 50 ms after its own start */
        use_device(0);
        for (int i = 0; i < 7; i++) check(launch(), "launch");
        printf("child %d\n", getpid());
        fflush(stdout);
        wait_for_stdin_close();
        _exit(0);
    }
    for (int i = 0; i < 2; i++) check(launch(), "launch");
    printf("parent %d\n", getpid());
    wait_for_stdin_close();
    waitpid(child, NULL, 0);
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc < 3) fprintf(stderr, "usage: cuda_client gpa|dlsym|direct SCENARIO [ARGS]\n"), exit(2);
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* As Python loads an extension module's C++ runtime: local to it, out of the global scope. */
    if (getenv("CLIENT_DLOPEN_LIBSTDCXX") && !dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL)) exit(6);
    load(argv[1]);
    const char *scenario = argv[2];
    if (!strcmp(scenario, "launches") && argc == 6) scenario_launches(atoi(argv[3]), atol(argv[4]), atoi(argv[5]));
    else if (!strcmp(scenario, "kernels") && argc >= 5) scenario_kernels(atoi(argv[3]), atoi(argv[4]), argc > 5 ? argv[5] : NULL);
    else if (!strcmp(scenario, "memory") && argc == 4) scenario_memory(atoi(argv[3]));
    else if (!strcmp(scenario, "limit") && argc == 4) scenario_limit(atoi(argv[3]));
    else if (!strcmp(scenario, "rate") && argc == 5) scenario_rate(atof(argv[3]), atof(argv[4]));
    else if (!strcmp(scenario, "batches") && argc == 6) scenario_batches(atof(argv[3]), atof(argv[4]), atoi(argv[5]));
    else if (!strcmp(scenario, "every-entry")) scenario_every_entry();
    else if (!strcmp(scenario, "copies")) scenario_copies();
    else if (!strcmp(scenario, "activity")) scenario_activity();
    else if (!strcmp(scenario, "fork")) scenario_fork();
    else if (!strcmp(scenario, "pools")) scenario_pools();
    else if (!strcmp(scenario, "pool-refill")) scenario_pool_refill();
    else if (!strcmp(scenario, "contexts")) scenario_contexts();
    else fprintf(stderr, "unknown scenario %s\n", scenario), exit(2);
    wait_for_stdin_close();
    return 0;
}
