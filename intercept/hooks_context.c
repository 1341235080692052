/*
 * hooks_context.c - follow which context, and so which device, each thread is
 * on, so launches can be attributed without asking the driver every time.
 */
#include "intercept.h"

ALNAIR_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = CALL_REAL(cuCtxSetCurrent, (ctx));
    if (r == CUDA_SUCCESS && alnair_active()) alnair_thread_uses(ctx);
    return r;
}

ALNAIR_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult r = CALL_REAL(cuCtxPushCurrent_v2, (ctx));
    if (r == CUDA_SUCCESS && alnair_active()) alnair_thread_uses(ctx);
    return r;
}

ALNAIR_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult r = CALL_REAL(cuCtxPopCurrent_v2, (pctx));
    if (r == CUDA_SUCCESS && alnair_active()) alnair_thread_context_changed();
    return r;
}

/* A new context is current on the calling thread. */
static CUresult created(CUresult r, CUcontext *pctx, CUdevice dev)
{
    if (r == CUDA_SUCCESS && pctx && alnair_active()) {
        alnair_context_bind(*pctx, dev);
        alnair_thread_uses(*pctx);
    }
    return r;
}

ALNAIR_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return created(CALL_REAL(cuCtxCreate_v2, (pctx, flags, dev)), pctx, dev);
}

ALNAIR_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                      CUdevice dev)
{
    return created(CALL_REAL(cuCtxCreate_v4, (pctx, ctxCreateParams, flags, dev)), pctx, dev);
}

ALNAIR_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult r = CALL_REAL(cuCtxDestroy_v2, (ctx));
    if (r == CUDA_SUCCESS && alnair_active()) {
        alnair_context_forget(ctx);
        alnair_thread_context_changed();
    }
    return r;
}

/* The primary context is not made current here, only remembered. */
ALNAIR_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = CALL_REAL(cuDevicePrimaryCtxRetain, (pctx, dev));
    if (r == CUDA_SUCCESS && pctx && alnair_active()) alnair_context_bind(*pctx, dev);
    return r;
}
