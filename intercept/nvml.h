/*
 * nvml.h - the little of NVML the library uses (nvml.c), loaded lazily on the
 * monitor thread and only by processes with a limit: the compute limit's
 * feedback reads per-process utilization, the memory limit what the GPU holds
 * for this process. Nothing here is on a launch or allocation path.
 */
#ifndef ALNAIR_NVML_H
#define ALNAIR_NVML_H

#include <stdint.h>

typedef struct { /* nvmlProcessUtilizationSample_t */
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} alnair_nvml_sample;

/* The NVML handle of the device with this ordinal and UUID (looked up once); NULL
 * without NVML or when it does not know the UUID. */
void *alnair_nvml_device(int ordinal, const uint8_t uuid[16]);

/* nvmlDeviceGetProcessUtilization: the samples after last_seen; 0 on success. */
int alnair_nvml_utilization(void *device, alnair_nvml_sample *samples, unsigned int *count,
                            unsigned long long last_seen);

/* The device memory NVML says the process with this pid holds (as NVML sees pids: the
 * host's); 0 and *bytes set if it lists it, -1 otherwise. */
int alnair_nvml_memory_of(void *device, unsigned int pid, uint64_t *bytes);

#endif
