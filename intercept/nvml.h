/*
 * nvml.h - the little of NVML the library uses (nvml.c), loaded lazily on the
 * monitor thread and only by processes with a memory limit: what the GPU holds
 * for this process. Nothing here is on a launch or allocation path.
 */
#ifndef ALNAIR_NVML_H
#define ALNAIR_NVML_H

#include <stdint.h>

/* The NVML handle of the device with this ordinal and UUID (looked up once); NULL
 * without NVML or when it does not know the UUID. */
void *alnair_nvml_device(int ordinal, const uint8_t uuid[16]);

/* The device memory NVML says the process with this pid holds (as NVML sees pids: the
 * host's); 0 and *bytes set if it lists it, -1 otherwise. */
int alnair_nvml_memory_of(void *device, unsigned int pid, uint64_t *bytes);

#endif
