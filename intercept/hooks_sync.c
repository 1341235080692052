/*
 * hooks_sync.c - the calls a program makes to wait for the GPU. While the process
 * takes turns, a wait that ends past its window shows its work ran there: that
 * overrun is given back from its next windows, and the wait tells how long its
 * launches take to run (compute_limit.c). Otherwise they pass straight through.
 */
#include "intercept.h"

static inline struct alnair_device *turn_taking_device(void)
{
    if (!alnair_active()) return NULL;
    struct alnair_device *d = alnair_current_device();
    return d && alnair_takes_turns(d) ? d : NULL;
}

#define SYNC(name, params, args) \
    ALNAIR_EXPORT CUresult name params \
    { \
        struct alnair_device *d = turn_taking_device(); \
        if (!d) return CALL_REAL(name, args); \
        uint64_t start = alnair_monotonic_ns(); \
        CUresult r = CALL_REAL(name, args); \
        alnair_synced(d, start, alnair_monotonic_ns()); \
        return r; \
    }

SYNC(cuCtxSynchronize, (void), ())
SYNC(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))
SYNC(cuStreamSynchronize, (CUstream hStream), (hStream))
SYNC(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
SYNC(cuEventSynchronize, (CUevent hEvent), (hEvent))
