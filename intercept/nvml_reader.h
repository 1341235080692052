/*
 * nvml_reader.h - NVML, read on a thread of its own for the monitor's tick: the GPU's busy
 * samples (GPU time's scale, gpu_time.c) and what the GPU holds for this process (held_memory.c).
 *
 * NVML's first call takes ~8 ms and a samples read ~2 ms (an H100), and a driver in trouble may
 * not answer at all. On its own thread none of that delays a publish or a limit's decision: a
 * hung NVML only stops its own figures (the scale stays at its latest, context growth stops).
 * The thread starts at the first ask, reads each device asked for (the busy samples of a device
 * the process has not worked on for a second only once a second), and keeps what it read for
 * the next take; it holds the lock only to hand readings over, never across an NVML call.
 */
#ifndef ALNAIR_NVML_READER_H
#define ALNAIR_NVML_READER_H

#include <stdint.h>

#include "device_busy.h"

/* The device's busy samples read since the last take, oldest first, at most max (the oldest are dropped
 * beyond); asks for them from now on. `worked`: the process had work on the device this tick. The thread reads
 * the samples every round while it did within the last second, and once a second otherwise: an idle process
 * (an inference server between requests) needs none soon, and a read costs ~2 ms of a core. */
int alnair_nvml_busy_taken(int ordinal, const uint8_t uuid[16], struct alnair_busy_sample *out, int max, int worked);

/* 1 and *bytes when a reading of what the GPU holds for this process came since the last take, else 0;
 * asks for them from now on. */
int alnair_nvml_held_taken(int ordinal, const uint8_t uuid[16], uint64_t *bytes);

#endif
