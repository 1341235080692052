/*
 * hooks_sync.c - the calls a program makes to wait for the GPU. With a compute
 * limit, a wait that ends past the process's window shows its work ran there:
 * that overrun is given back from its next windows (compute_limit.c). Without a
 * limit they pass straight through.
 */
#include "intercept.h"

static inline struct alnair_device *limited_device(void)
{
    if (!alnair_active()) return NULL;
    struct alnair_device *d = alnair_current_device();
    return d && d->compute_limit_percent ? d : NULL;
}

#define SYNC(name, params, args) \
    ALNAIR_EXPORT CUresult name params \
    { \
        struct alnair_device *d = limited_device(); \
        return CALL_REAL_TIMED(d, name, args); \
    }

SYNC(cuCtxSynchronize, (void), ())
SYNC(cuCtxSynchronize_v2, (CUcontext ctx), (ctx))
SYNC(cuStreamSynchronize, (CUstream hStream), (hStream))
SYNC(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
SYNC(cuEventSynchronize, (CUevent hEvent), (hEvent))
