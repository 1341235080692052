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
#define ENTRY_POINTS(X) \
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
    X(cuGetProcAddress, "cuGetProcAddress", 11030, 0) X(cuGetProcAddress_v2, "cuGetProcAddress", 13000, 0)

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
    long n = 0;
    double start = seconds_now();
    for (end = start + seconds; seconds_now() < end; n += batch) {
        for (int i = 0; i < batch; i++) check(launch(), "launch");
        check(cu.cuCtxSynchronize(), "sync");
    }
    printf("device_share %.3f\n", n * launch_seconds / (seconds_now() - start));
}

/* ---- scenario: call every hooked entry point once -------------------------- */

static void report_wrapped(void)
{
    Dl_info info;
#define WRAPPED(name, query, version, flags) \
    printf("wrapped %s %s\n", #name, \
           cu.name && dladdr((void *)cu.name, &info) && strstr(info.dli_fname, "libalnair") ? "yes" : "no");
    ENTRY_POINTS(WRAPPED)
}

static void scenario_every_entry(void)
{
    report_wrapped();
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
    check(cu.cuMemAllocFromPoolAsync(&pool, 5 * MIB, NULL, NULL), "pool");
    check(cu.cuMemAllocFromPoolAsync_ptsz(&pool_ptsz, 6 * MIB, NULL, NULL), "pool ptsz");
    check(cu.cuMemCreate(&handle, 8 * MIB, &prop, 0), "create");
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
#define DRIVER(name, query, version, flags) printf("driver %s %llu\n", #name, (unsigned long long)driver_calls(#name));
    ENTRY_POINTS(DRIVER)
}

/* ---- scenario: fork ---------------------------------------------------------- */

static void scenario_fork(void)
{
    use_device(0);
    for (int i = 0; i < 5; i++) check(launch(), "launch");
    pid_t child = fork();
    if (child == 0) {
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
    load(argv[1]);
    const char *scenario = argv[2];
    if (!strcmp(scenario, "launches") && argc == 6) scenario_launches(atoi(argv[3]), atol(argv[4]), atoi(argv[5]));
    else if (!strcmp(scenario, "memory") && argc == 4) scenario_memory(atoi(argv[3]));
    else if (!strcmp(scenario, "limit") && argc == 4) scenario_limit(atoi(argv[3]));
    else if (!strcmp(scenario, "rate") && argc == 5) scenario_rate(atof(argv[3]), atof(argv[4]));
    else if (!strcmp(scenario, "batches") && argc == 6) scenario_batches(atof(argv[3]), atof(argv[4]), atoi(argv[5]));
    else if (!strcmp(scenario, "every-entry")) scenario_every_entry();
    else if (!strcmp(scenario, "fork")) scenario_fork();
    else fprintf(stderr, "unknown scenario %s\n", scenario), exit(2);
    wait_for_stdin_close();
    return 0;
}
