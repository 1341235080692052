/*
 * hooks_sync.c - the calls a program makes to wait for the GPU. One that returns
 * ends the process's busy span on the device (gpu_time.c): its queue is empty.
 * An idle process's calls pass straight through.
 */
#include "intercept.h"

static inline struct alnair_device *busy_device(void)
{
    if (!alnair_active()) return NULL;
    struct alnair_device *d = alnair_current_device();
    return d && alnair_gpu_time_busy(&d->gpu_time) ? d : NULL;
}

#define SYNC(name, params, args) \
    ALNAIR_EXPORT CUresult name params \
    { \
        struct alnair_device *d = busy_device(); \
        if (!d) return CALL_REAL(name, args); \
        atomic_fetch_add_explicit(&d->gpu_time.syncing, 1, memory_order_relaxed); \
        CUresult r = CALL_REAL(name, args); \
        atomic_fetch_sub_explicit(&d->gpu_time.syncing, 1, memory_order_relaxed); \
        if (r == CUDA_SUCCESS) alnair_gpu_time_end(&d->gpu_time, alnair_monotonic_ns()); \
        return r; \
    }

SYNC(cuCtxSynchronize, (void), ())
SYNC(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))
SYNC(cuStreamSynchronize, (CUstream hStream), (hStream))
SYNC(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
SYNC(cuEventSynchronize, (CUevent hEvent), (hEvent))
