/*
 * nvml.h - the little of NVML the library uses (nvml.c), loaded lazily and called
 * only on the NVML thread (nvml_reader.c): what the GPU holds for this process (for
 * a memory limit) and how busy the GPU was (for GPU time).
 */
#ifndef ALNAIR_NVML_H
#define ALNAIR_NVML_H

#include <stdint.h>

#include "device_busy.h"

/* The NVML handle of the device with this ordinal and UUID (looked up once); NULL
 * without NVML or when it does not know the UUID. */
void *alnair_nvml_device(int ordinal, const uint8_t uuid[16]);

/* The device memory NVML says the process with this pid holds (as NVML sees pids: the
 * host's); 0 and *bytes set if it lists it, -1 otherwise. */
int alnair_nvml_memory_of(void *device, unsigned int pid, uint64_t *bytes);

/* The device's GPU utilization samples taken after *last_us (NVML's clock; 0: only the latest), at most max,
 * oldest first, their ends on CLOCK_MONOTONIC; *last_us moves to the newest. Returns how many (0 without them). */
int alnair_nvml_busy_samples(void *device, uint64_t *last_us, struct alnair_busy_sample *out, int max);

#endif
