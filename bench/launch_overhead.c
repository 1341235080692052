/*
 * launch_overhead.c - cuLaunchKernel, or one kind of copy, in a tight loop, reached
 * as the CUDA runtime reaches it (cuGetProcAddress_v2 on libcuda.so.1). Run with and
 * without the intercept preloaded against a driver whose calls return at once.
 *   launch_overhead CALLS ROUNDS [MODE]   prints each round's ns per call
 * MODE: launch (the default); copy-htod-async (cuMemcpyHtoDAsync_v2: the direction is
 * in the name, the device from the address map); copy-unified-async (cuMemcpyAsync:
 * both pointers looked up); copy-htod (cuMemcpyHtoD_v2: synchronous, so also timed).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_driver.h"

typedef CUresult (*launch_fn) ALNAIR_LAUNCH_PARAMS;
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*htod_async_fn) ALNAIR_COPY_HTOD_ASYNC_PARAMS;
typedef CUresult (*unified_async_fn) ALNAIR_COPY_UNIFIED_ASYNC_PARAMS;
typedef CUresult (*htod_fn) ALNAIR_COPY_HTOD_PARAMS;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static gpa_fn gpa;

/* One of 8 kernel handles in turn, as a training step launches a few kernels over and over (the intercept counts
 * each by handle): heap addresses, as the driver's handles are. */
static CUfunction kernels[8];
static CUfunction kernel(long i) { return kernels[i & 7]; }

static void *lookup(const char *name)
{
    void *fn = NULL;
    gpa(name, &fn, 13000, 0, NULL);
    if (!fn) fprintf(stderr, "no %s\n", name), exit(1);
    return fn;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 10;
    const char *mode = argc > 3 ? argv[3] : "launch";
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) return fprintf(stderr, "%s\n", dlerror()), 1;
    gpa = (gpa_fn)dlsym(cuda, "cuGetProcAddress_v2");
    launch_fn launch = (launch_fn)lookup("cuLaunchKernel");
    htod_async_fn htod_async = (htod_async_fn)lookup("cuMemcpyHtoDAsync");
    unified_async_fn unified_async = (unified_async_fn)lookup("cuMemcpyAsync");
    htod_fn htod = (htod_fn)lookup("cuMemcpyHtoD");
    for (int k = 0; k < 8; k++) kernels[k] = malloc(64);
    CUcontext ctx;
    ((retain_fn)lookup("cuDevicePrimaryCtxRetain"))(&ctx, 0);
    ((set_fn)lookup("cuCtxSetCurrent"))(ctx);
    CUdeviceptr device;
    static char host[4096];
    if (((alloc_fn)lookup("cuMemAlloc"))(&device, 1 << 20) != CUDA_SUCCESS) return fprintf(stderr, "alloc\n"), 1;
    CUdeviceptr dst = device + 4096; /* an interior pointer, as a caching allocator's blocks are */
    for (int r = 0; r < rounds; r++) {
        double start = now_ns();
        if (!strcmp(mode, "launch"))
            for (long i = 0; i < calls; i++) launch(kernel(i), 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        else if (!strcmp(mode, "copy-htod-async"))
            for (long i = 0; i < calls; i++) htod_async(dst, host, sizeof host, NULL);
        else if (!strcmp(mode, "copy-unified-async"))
            for (long i = 0; i < calls; i++) unified_async(dst, (CUdeviceptr)(uintptr_t)host, sizeof host, NULL);
        else if (!strcmp(mode, "copy-htod"))
            for (long i = 0; i < calls; i++) htod(dst, host, sizeof host);
        else
            return fprintf(stderr, "unknown mode %s\n", mode), 2;
        printf("%.2f\n", (now_ns() - start) / calls);
    }
    return 0;
}
