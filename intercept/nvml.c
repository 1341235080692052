/* nvml.c - see nvml.h. */
#define _GNU_SOURCE
#include "nvml.h"
#include "intercept.h"

#include <dlfcn.h>
#include <stdio.h>

typedef struct { /* nvmlProcessInfo_v2_t, which the _v3 call fills */
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} process_info;

#define MAX_PROCESSES 256

static struct {
    int tried, ok;
    int (*init)(void);
    int (*handle_by_uuid)(const char *, void **);
    int (*running_processes)(void *, unsigned int *, process_info *); /* NULL on drivers before it */
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
