/*
 * hooks_sync.c - the calls a program makes to wait for the GPU. One that returns
 * ends the process's busy span on the device (gpu_time.c): its queue is empty.
 * While the process takes turns, a wait that ends past its window shows its work
 * ran there: that overrun is given back from its next windows, and the wait tells
 * how long its launches take to run (compute_limit.c). An idle process's calls
 * pass straight through.
 */
#include "intercept.h"

static inline struct alnair_device *busy_device(void)
{
    if (!alnair_active()) return NULL;
    struct alnair_device *d = alnair_current_device();
    return d && (alnair_gpu_time_busy(&d->gpu_time) || alnair_takes_turns(d)) ? d : NULL;
}

#define SYNC(name, params, args) \
    ALNAIR_EXPORT CUresult name params \
    { \
        struct alnair_device *d = busy_device(); \
        if (!d) return CALL_REAL(name, args); \
        uint64_t start = alnair_monotonic_ns(); \
        atomic_fetch_add_explicit(&d->gpu_time.syncing, 1, memory_order_relaxed); \
        CUresult r = CALL_REAL(name, args); \
        atomic_fetch_sub_explicit(&d->gpu_time.syncing, 1, memory_order_relaxed); \
        uint64_t end = alnair_monotonic_ns(); \
        if (r == CUDA_SUCCESS) alnair_gpu_time_end(&d->gpu_time, end); \
        if (alnair_takes_turns(d)) alnair_synced(d, start, end); \
        return r; \
    }

SYNC(cuCtxSynchronize, (void), ())
SYNC(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))
SYNC(cuStreamSynchronize, (CUstream hStream), (hStream))
SYNC(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
SYNC(cuEventSynchronize, (CUevent hEvent), (hEvent))
