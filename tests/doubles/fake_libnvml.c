/*
 * fake_libnvml.c - TEST DOUBLE of NVIDIA's NVML library, built by the tests as
 * libnvidia-ml.so.1 for the processes that ask for it (on LD_LIBRARY_PATH).
 *
 * The intercept calls nvmlInit_v2, nvmlDeviceGetHandleByUUID (always device 0),
 * nvmlDeviceGetSamples (how busy the GPU was, for GPU time) and
 * nvmlDeviceGetComputeRunningProcesses_v3 (what the GPU holds for the process).
 * Like the real one, a GPU utilization samples call returns the samples taken
 * after the caller's lastSeenTimeStamp (microseconds of the real-time clock): one
 * every FAKE_NVML_SAMPLE_MS (default 100) of that clock, the last 100 of them,
 * each FAKE_NVML_GPU_UTIL percent (below); none yet is NVML_ERROR_NOT_FOUND.
 * The running processes: the caller, holding what the fake driver's device 0 has
 * allocated (its allocations and contexts) plus FAKE_NVML_CONTEXT_GROWTH_BYTES
 * (memory its contexts gained after creation, which the driver's counters miss).
 * FAKE_NVML_HANG=init or samples: that call never returns, as a driver in trouble's.
 * FAKE_NVML_SAMPLES_LOG=path: each samples call appends its CLOCK_MONOTONIC ns there (how often it is read).
 *
 * alnair top enumerates the GPUs (nvmlDeviceGetCount_v2, GetHandleByIndex_v2,
 * GetName, GetUtilizationRates, GetMemoryInfo) and reads SM active through GPM
 * (nvmlGpmQueryDeviceSupport, SampleAlloc/Get/Free, MetricsGet). Per GPU, from
 * comma-separated lists (GPU i takes the i-th item; a missing item is 0):
 * FAKE_NVML_GPUS (count, default 1), FAKE_NVML_GPU_UTIL and FAKE_NVML_MEMORY_UTIL
 * (percent; "x" makes that GPU's utilization query fail, NOT_SUPPORTED as on a
 * MIG-enabled GPU), FAKE_NVML_MEMORY_USED (bytes of FAKE_TOTAL below),
 * FAKE_NVML_GPM (1: supported; default 0, as before Hopper) and
 * FAKE_NVML_SM_ACTIVE (percent of SMs busy). A GPM sample holds its time and an
 * SM-active counter that grows at that rate, and MetricsGet divides the counters'
 * difference by the time between the two samples, as the real one does, so only
 * two samples of one device taken apart in time give a value.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum {
    NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
};

enum { MAX_GPUS = 8 };
static int devices[MAX_GPUS]; /* what the handles point at */
#define device_handle devices[0] /* the limits see one device */

static void hang_in(const char *call)
{
    const char *hang = getenv("FAKE_NVML_HANG");
    while (hang && !strcmp(hang, call)) pause();
}

EXPORT int nvmlInit_v2(void)
{
    hang_in("init");
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, void **device)
{
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &device_handle;
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

/* ---- alnair top: the node's GPUs ---- */

static unsigned int gpu_count(void)
{
    const char *v = getenv("FAKE_NVML_GPUS");
    unsigned int n = v ? (unsigned int)atoi(v) : 1;
    return n > MAX_GPUS ? MAX_GPUS : n;
}

static int gpu_index(void *device)
{
    for (unsigned int i = 0; i < gpu_count(); i++)
        if (device == &devices[i]) return (int)i;
    return -1;
}

/* The index-th item of a comma-separated list in the environment variable; NULL when absent. */
static const char *item(const char *name, int index, char *buf, size_t size)
{
    const char *v = getenv(name);
    for (int i = 0; v && i < index; i++) {
        v = strchr(v, ',');
        if (v) v++;
    }
    if (!v || !*v) return NULL;
    size_t n = strcspn(v, ",");
    if (n >= size) n = size - 1;
    memcpy(buf, v, n);
    buf[n] = 0;
    return buf;
}

static unsigned long long number(const char *name, int index)
{
    char buf[32];
    const char *v = item(name, index, buf, sizeof buf);
    return v ? strtoull(v, NULL, 10) : 0;
}

static double real(const char *name, int index)
{
    char buf[32];
    const char *v = item(name, index, buf, sizeof buf);
    return v ? strtod(v, NULL) : 0;
}

EXPORT int nvmlShutdown(void) { return NVML_SUCCESS; }

EXPORT int nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count();
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device)
{
    if (!device || index >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

EXPORT int nvmlDeviceGetName(void *device, char *name, unsigned int length)
{
    int i = gpu_index(device);
    if (i < 0 || !name) return NVML_ERROR_INVALID_ARGUMENT;
    char text[64];
    int n = snprintf(text, sizeof text, "Fake GPU %d", i);
    if ((unsigned int)n >= length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(name, text, (size_t)n + 1);
    return NVML_SUCCESS;
}

typedef struct { unsigned int gpu, memory; } nvml_utilization;

EXPORT int nvmlDeviceGetUtilizationRates(void *device, nvml_utilization *utilization)
{
    int i = gpu_index(device);
    if (i < 0 || !utilization) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[32];
    const char *gpu = item("FAKE_NVML_GPU_UTIL", i, buf, sizeof buf);
    if (gpu && *gpu == 'x') return NVML_ERROR_NOT_SUPPORTED;
    *utilization = (nvml_utilization){(unsigned int)number("FAKE_NVML_GPU_UTIL", i),
                                      (unsigned int)number("FAKE_NVML_MEMORY_UTIL", i)};
    return NVML_SUCCESS;
}

#define FAKE_TOTAL (80ull << 30)

typedef struct { unsigned long long total, free, used; } nvml_memory;

EXPORT int nvmlDeviceGetMemoryInfo(void *device, nvml_memory *memory)
{
    int i = gpu_index(device);
    if (i < 0 || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = number("FAKE_NVML_MEMORY_USED", i);
    *memory = (nvml_memory){FAKE_TOTAL, FAKE_TOTAL - used, used};
    return NVML_SUCCESS;
}

/* GPM, laid out as nvml.h declares it. */
typedef struct { unsigned int version, isSupportedDevice; } nvml_gpm_support;
typedef struct fake_sample { int gpu; double seconds, sm_active_seconds; } fake_sample;
typedef struct {
    unsigned int metricId;
    int nvmlReturn;
    double value;
    struct { char *shortName, *longName, *unit; } metricInfo;
} nvml_gpm_metric;
typedef struct {
    unsigned int version, numMetrics;
    fake_sample *sample1, *sample2;
    nvml_gpm_metric metrics[477]; /* NVML_GPM_METRIC_MAX in nvml.h 13.x */
} nvml_gpm_metrics_get;
enum { GPM_SM_UTIL = 2 };

EXPORT int nvmlGpmQueryDeviceSupport(void *device, nvml_gpm_support *support)
{
    int i = gpu_index(device);
    if (i < 0 || !support) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != 1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = number("FAKE_NVML_GPM", i) == 1;
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleAlloc(fake_sample **sample)
{
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    (*sample)->gpu = -1;
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleFree(fake_sample *sample)
{
    free(sample);
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmSampleGet(void *device, fake_sample *sample)
{
    int i = gpu_index(device);
    if (i < 0 || !sample) return NVML_ERROR_INVALID_ARGUMENT;
    if (number("FAKE_NVML_GPM", i) != 1) return NVML_ERROR_NOT_SUPPORTED;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    sample->gpu = i;
    sample->seconds = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    sample->sm_active_seconds = sample->seconds * real("FAKE_NVML_SM_ACTIVE", i) / 100.0;
    return NVML_SUCCESS;
}

EXPORT int nvmlGpmMetricsGet(nvml_gpm_metrics_get *get)
{
    if (!get) return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != 1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    fake_sample *a = get->sample1, *b = get->sample2;
    if (!a || !b || a->gpu < 0 || a->gpu != b->gpu || b->seconds <= a->seconds || get->numMetrics > 477)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int m = 0; m < get->numMetrics; m++) {
        nvml_gpm_metric *metric = &get->metrics[m];
        metric->nvmlReturn = metric->metricId == GPM_SM_UTIL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
        metric->value = metric->metricId == GPM_SM_UTIL
                            ? 100.0 * (b->sm_active_seconds - a->sm_active_seconds) / (b->seconds - a->seconds)
                            : 0;
    }
    return NVML_SUCCESS;
}

/* ---- GPU time: the GPU's utilization samples ---- */

typedef struct {
    unsigned long long timeStamp;
    unsigned long long value; /* nvmlValue_t: an unsigned int in its low half, as NVML_VALUE_TYPE_UNSIGNED_INT */
} nvml_sample;

enum { GPU_UTILIZATION_SAMPLES = 1, VALUE_UNSIGNED_INT = 1, KEPT = 100 };

static void log_samples_call(void)
{
    const char *path = getenv("FAKE_NVML_SAMPLES_LOG");
    int fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT, 0644) : -1;
    if (fd < 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    dprintf(fd, "%lld\n", (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec);
    close(fd);
}

EXPORT int nvmlDeviceGetSamples(void *device, int type, unsigned long long last_seen, int *value_type,
                                unsigned int *count, nvml_sample *samples)
{
    hang_in("samples");
    log_samples_call();
    int i = gpu_index(device);
    if (i < 0 || !count || !value_type) return NVML_ERROR_INVALID_ARGUMENT;
    char buf[32];
    const char *util = item("FAKE_NVML_GPU_UTIL", i, buf, sizeof buf);
    if (type != GPU_UTILIZATION_SAMPLES || (util && !strcmp(util, "x"))) return NVML_ERROR_NOT_SUPPORTED;
    unsigned long long period = getenv("FAKE_NVML_SAMPLE_MS") ? number("FAKE_NVML_SAMPLE_MS", 0) * 1000 : 100000;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    unsigned long long newest = ((unsigned long long)tv.tv_sec * 1000000ull + (unsigned long long)tv.tv_usec) / period;
    unsigned long long oldest = last_seen / period + 1;
    if (oldest + KEPT <= newest) oldest = newest - KEPT + 1;
    if (oldest > newest) return NVML_ERROR_NOT_FOUND;
    unsigned int n = (unsigned int)(newest - oldest + 1);
    if (!samples || *count < n) {
        *count = n;
        return samples ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned int k = 0; k < n; k++)
        samples[k] = (nvml_sample){.timeStamp = (oldest + k) * period, .value = number("FAKE_NVML_GPU_UTIL", i)};
    *value_type = VALUE_UNSIGNED_INT;
    *count = n;
    return NVML_SUCCESS;
}
