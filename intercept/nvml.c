/* nvml.c - see nvml.h. */
#define _GNU_SOURCE
#include "nvml.h"
#include "intercept.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { /* nvmlProcessInfo_v2_t, which the _v3 call fills */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} process_info;

typedef struct { /* nvmlSample_t */
    unsigned long long time_us;
    union { double d; unsigned int u; unsigned long long ull; } value; /* nvmlValue_t, as its type says */
} sample;

enum { GPU_UTILIZATION_SAMPLES = 1, VALUE_DOUBLE = 0, VALUE_UNSIGNED_INT = 1 }; /* nvmlSamplingType_t, nvmlValueType_t */

#define MAX_PROCESSES 256
#define MAX_SAMPLES 1024 /* more than a driver keeps (an H100's held 71): fewer would fail the call */

static struct {
    int tried, ok;
    int (*init)(void);
    int (*handle_by_uuid)(const char *, void **);
    int (*running_processes)(void *, unsigned int *, process_info *); /* NULL on drivers before it */
    int (*samples)(void *, int, unsigned long long, int *, unsigned int *, sample *);
    void *devices[ALNAIR_CUDA_MAX_DEVICES];
    int looked_up[ALNAIR_CUDA_MAX_DEVICES];
} nvml;

static int load(void)
{
    if (nvml.tried) return nvml.ok;
    nvml.tried = 1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) return 0;
    alnair_dlsym_fn lookup = alnair_real_dlsym();
    *(void **)&nvml.init = lookup(lib, "nvmlInit_v2");
    *(void **)&nvml.handle_by_uuid = lookup(lib, "nvmlDeviceGetHandleByUUID");
    *(void **)&nvml.running_processes = lookup(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    *(void **)&nvml.samples = lookup(lib, "nvmlDeviceGetSamples");
    nvml.ok = nvml.init && nvml.handle_by_uuid && nvml.init() == 0;
    return nvml.ok;
}

void *alnair_nvml_device(int ordinal, const uint8_t uuid[16])
{
    if (!uuid || ordinal < 0 || ordinal >= ALNAIR_CUDA_MAX_DEVICES || !load()) return NULL;
    if (!nvml.looked_up[ordinal]) {
        const uint8_t *u = uuid;
        char text[64];
        snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        nvml.looked_up[ordinal] = 1;
        if (nvml.handle_by_uuid(text, &nvml.devices[ordinal]) != 0) nvml.devices[ordinal] = NULL;
    }
    return nvml.devices[ordinal];
}

int alnair_nvml_memory_of(void *device, unsigned int pid, uint64_t *bytes)
{
    process_info processes[MAX_PROCESSES];
    unsigned int n = MAX_PROCESSES;
    if (!device || !nvml.running_processes || nvml.running_processes(device, &n, processes) != 0) return -1;
    for (unsigned int i = 0; i < n && i < MAX_PROCESSES; i++)
        if (processes[i].pid == pid && processes[i].usedGpuMemory != ~0ull) { /* all ones: not available */
            *bytes = processes[i].usedGpuMemory;
            return 0;
        }
    return -1;
}

int alnair_nvml_busy_samples(void *device, uint64_t *last_us, struct alnair_busy_sample *out, int max)
{
    static sample got[MAX_SAMPLES]; /* the NVML thread's alone */
    unsigned int n = MAX_SAMPLES;
    int type = -1;
    if (!device || !nvml.samples || nvml.samples(device, GPU_UTILIZATION_SAMPLES, *last_us, &type, &n, got) != 0) return 0;
    if (type != VALUE_UNSIGNED_INT && type != VALUE_DOUBLE) return 0;
    if (n > MAX_SAMPLES) n = MAX_SAMPLES;
    for (unsigned int i = 1; i < n; i++) /* oldest first */
        for (unsigned int j = i; j > 0 && got[j - 1].time_us > got[j].time_us; j--) {
            sample t = got[j];
            got[j] = got[j - 1], got[j - 1] = t;
        }
    /* Its microseconds are the real-time clock's (the monotonic clock's on some drivers): whichever the latest is nearer. */
    uint64_t real = alnair_realtime_ns(), mono = alnair_monotonic_ns(), latest = n ? got[n - 1].time_us : 0;
    int64_t to_mono = llabs((int64_t)(latest * 1000 - real)) < llabs((int64_t)(latest * 1000 - mono)) ? (int64_t)(mono - real) : 0;
    int first = *last_us == 0, k = 0; /* a first call gives the driver's whole history: only its latest counts */
    for (unsigned int i = 0; i < n && k < max; i++) {
        if (first && got[i].time_us != latest) continue;
        double percent = type == VALUE_DOUBLE ? got[i].value.d : (double)got[i].value.u;
        out[k++] = (struct alnair_busy_sample){.end_ns = (uint64_t)((int64_t)(got[i].time_us * 1000) + to_mono),
                                               .busy = percent / 100.0};
    }
    *last_us = latest > *last_us ? latest : *last_us;
    return k;
}
