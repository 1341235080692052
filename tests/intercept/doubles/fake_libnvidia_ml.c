/*
 * fake_libnvidia_ml.c - TEST DOUBLE of NVML (libnvidia-ml.so.1) for the intercept's tests: the
 * four calls intercept/nvml.c makes, at their boundary. Any UUID names a device; the device's
 * GPU utilization samples come every 1/6 s of the real-time clock (as an H200's do), each
 * FAKE_NVML_BUSY percent (default 100: a saturated GPU); the running processes are not
 * supported (the library then reads no memory from NVML).
 */
#include <stdlib.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define PERIOD_US 166667ull
#define HISTORY_US 1000000ull /* the samples a driver keeps: the last second */

typedef struct {
    unsigned long long time_us;
    union { double d; unsigned int u; unsigned long long ull; } value;
} sample;

enum { SUCCESS = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, INSUFFICIENT_SIZE = 7, NOT_FOUND = 6 };
enum { GPU_UTILIZATION_SAMPLES = 1, VALUE_UNSIGNED_INT = 1 };

static int device; /* the one handle */

EXPORT int nvmlInit_v2(void) { return SUCCESS; }

EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, void **handle)
{
    if (!uuid || !handle) return INVALID_ARGUMENT;
    *handle = &device;
    return SUCCESS;
}

EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void *handle, unsigned int *count, void *infos)
{
    (void)handle, (void)count, (void)infos;
    return NOT_SUPPORTED;
}

/* The periods that ended after last_us (within the kept history), oldest first. */
EXPORT int nvmlDeviceGetSamples(void *handle, int type, unsigned long long last_us, int *value_type,
                                unsigned int *count, sample *samples)
{
    if (handle != &device || type != GPU_UTILIZATION_SAMPLES || !value_type || !count) return INVALID_ARGUMENT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
    unsigned long long from = last_us > now - HISTORY_US ? last_us : now - HISTORY_US;
    const char *busy = getenv("FAKE_NVML_BUSY");
    unsigned int percent = busy ? (unsigned int)atoi(busy) : 100, n = 0;
    *value_type = VALUE_UNSIGNED_INT;
    for (unsigned long long end = (from / PERIOD_US + 1) * PERIOD_US; end <= now; end += PERIOD_US) {
        if (samples && n < *count) samples[n] = (sample){.time_us = end, .value.u = percent};
        n++;
    }
    if (samples && n > *count) return INSUFFICIENT_SIZE;
    *count = n;
    return SUCCESS;
}
