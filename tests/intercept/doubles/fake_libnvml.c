/*
 * fake_libnvml.c - TEST DOUBLE of NVIDIA's NVML library, built by the tests as
 * libnvidia-ml.so.1 for the processes that ask for it (on LD_LIBRARY_PATH), with
 * the calls the limits make: nvmlInit_v2, nvmlDeviceGetHandleByUUID,
 * nvmlDeviceGetProcessUtilization (the compute limit's feedback) and
 * nvmlDeviceGetComputeRunningProcesses_v3 (what the GPU holds for the process).
 *
 * Like the real one, each utilization call returns the samples taken after the
 * caller's lastSeenTimeStamp (microseconds of the real-time clock), here one per
 * call and process: the caller's own, with FAKE_NVML_SM_UTIL percent (default 0),
 * and, with FAKE_NVML_OTHER_SM_UTIL set, one of another process (pid 1) with
 * that many percent: a process on the GPU that is not in the share table.
 * The running processes: the caller, holding what the fake driver's device 0 has
 * allocated (its allocations and contexts) plus FAKE_NVML_CONTEXT_GROWTH_BYTES
 * (memory its contexts gained after creation, which the driver's counters miss).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvml_process_sample;

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_INSUFFICIENT_SIZE = 7 };

static int device_handle; /* what the handle points at: one device is enough */

EXPORT int nvmlInit_v2(void) { return NVML_SUCCESS; }

EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, void **device)
{
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &device_handle;
    return NVML_SUCCESS;
}

static unsigned int percent(const char *name)
{
    const char *v = getenv(name);
    return v ? (unsigned int)atoi(v) : 0;
}

EXPORT int nvmlDeviceGetProcessUtilization(void *device, nvml_process_sample *samples, unsigned int *count,
                                           unsigned long long last_seen)
{
    if (device != &device_handle || !count) return NVML_ERROR_INVALID_ARGUMENT;
    int other = getenv("FAKE_NVML_OTHER_SM_UTIL") != NULL;
    unsigned int n = 1 + (unsigned int)other;
    if (!samples || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    unsigned long long now = (unsigned long long)tv.tv_sec * 1000000ull + (unsigned long long)tv.tv_usec;
    if (now <= last_seen) now = last_seen + 1;
    memset(samples, 0, n * sizeof *samples);
    samples[0] = (nvml_process_sample){.pid = (unsigned int)getpid(), .timeStamp = now,
                                       .smUtil = percent("FAKE_NVML_SM_UTIL")};
    if (other) samples[1] = (nvml_process_sample){.pid = 1, .timeStamp = now, .smUtil = percent("FAKE_NVML_OTHER_SM_UTIL")};
    *count = n;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvml_process_info;

static unsigned long long driver_used_bytes(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    uint64_t (*used)(int) = driver ? (uint64_t(*)(int))dlsym(driver, "fake_cuda_used_bytes") : NULL;
    return used ? used(0) : 0;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, nvml_process_info *infos)
{
    if (device != &device_handle || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!infos || *count < 1) {
        *count = 1;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    const char *growth = getenv("FAKE_NVML_CONTEXT_GROWTH_BYTES");
    infos[0] = (nvml_process_info){.pid = (unsigned int)getpid(),
                                   .usedGpuMemory = driver_used_bytes() + (growth ? strtoull(growth, NULL, 10) : 0)};
    *count = 1;
    return NVML_SUCCESS;
}
