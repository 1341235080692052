/*
 * launch_overhead.c - cuLaunchKernel in a tight loop, reached as the CUDA runtime
 * reaches it (cuGetProcAddress_v2 on libcuda.so.1). Run with and without the
 * intercept preloaded against a driver whose launch returns at once.
 *   launch_overhead CALLS ROUNDS   prints each round's ns per call
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_driver.h"

typedef CUresult (*launch_fn) ALNAIR_LAUNCH_PARAMS;
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*set_fn)(CUcontext);

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 10;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) return fprintf(stderr, "%s\n", dlerror()), 1;
    gpa_fn gpa = (gpa_fn)dlsym(cuda, "cuGetProcAddress_v2");
    launch_fn launch;
    retain_fn retain;
    set_fn set_current;
    gpa("cuLaunchKernel", (void **)&launch, 13000, 0, NULL);
    gpa("cuDevicePrimaryCtxRetain", (void **)&retain, 13000, 0, NULL);
    gpa("cuCtxSetCurrent", (void **)&set_current, 13000, 0, NULL);
    CUcontext ctx;
    retain(&ctx, 0);
    set_current(ctx);
    for (int r = 0; r < rounds; r++) {
        double start = now_ns();
        for (long i = 0; i < calls; i++) launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        printf("%.2f\n", (now_ns() - start) / calls);
    }
    return 0;
}
