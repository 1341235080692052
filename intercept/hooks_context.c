/*
 * hooks_context.c - follow which context, and so which device, each thread is
 * on, so launches can be attributed without asking the driver every time.
 */
#include <pthread.h>

#include "intercept.h"

/* ---- the context's own memory ---------------------------------------------
 *
 * No allocation shows what a context holds itself (its code, stacks, printf and heap buffers: hundreds
 * of MiB on an H200), and without NVML the driver API has one view of device memory: cuMemGetInfo's
 * free, for the whole device. So the first context of the process on a device is measured by creating a
 * probe context beside it: the fall in free across the probe's creation is what a context costs there,
 * and free returning to its first reading after the probe is destroyed proves nobody else allocated or
 * freed meanwhile (else it is tried again, 3 times, then left unmeasured: 0). Every later context on the
 * device is charged the same size. What a context grows by later (modules loaded lazily) is not seen:
 * docs/intercept.md, "Memory as the GPU sees it". */

#define MEASURE_TRIES 3
#define QUIET_BYTES (2ull << 20) /* free may move this much between the readings and still count as quiet */

static pthread_mutex_t measure_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t context_size[ALNAIR_CUDA_MAX_DEVICES]; /* 0: not measured yet */
static unsigned char measure_tried[ALNAIR_CUDA_MAX_DEVICES];

static int free_now(size_t *out)
{
    size_t total;
    return CALL_REAL(cuMemGetInfo_v2, (out, &total)) == CUDA_SUCCESS;
}

static CUresult create_probe(CUcontext *probe, CUdevice dev)
{
    CUresult r = CALL_REAL(cuCtxCreate_v4, (probe, NULL, 0, dev));
    return r == CUDA_SUCCESS ? r : CALL_REAL(cuCtxCreate_v2, (probe, 0, dev));
}

/* With ctx pushed current on this thread: one probe, its cost or 0 if the readings were not quiet. */
static uint64_t probe_once(CUdevice dev)
{
    size_t before, during, after;
    CUcontext probe = NULL;
    if (!free_now(&before) || create_probe(&probe, dev) != CUDA_SUCCESS) return 0;
    int read = free_now(&during); /* the probe is current now */
    CALL_REAL(cuCtxDestroy_v2, (probe)); /* and popped by its destruction */
    if (!read || !free_now(&after) || during >= before) return 0;
    uint64_t moved = after > before ? after - before : before - after;
    return moved <= QUIET_BYTES ? (uint64_t)(before - during) : 0;
}

static uint64_t measure(CUcontext ctx, CUdevice dev)
{
    if (dev < 0 || dev >= ALNAIR_CUDA_MAX_DEVICES) return 0;
    pthread_mutex_lock(&measure_lock);
    if (!measure_tried[dev] && CALL_REAL(cuCtxPushCurrent_v2, (ctx)) == CUDA_SUCCESS) {
        measure_tried[dev] = 1;
        for (int i = 0; i < MEASURE_TRIES && !context_size[dev]; i++) context_size[dev] = probe_once(dev);
        CUcontext popped;
        CALL_REAL(cuCtxPopCurrent_v2, (&popped));
    }
    uint64_t size = context_size[dev];
    pthread_mutex_unlock(&measure_lock);
    return size;
}

/* A context the process holds now: charged its own memory once. */
static void holds(CUcontext ctx, CUdevice dev)
{
    if (alnair_context_claim_measurement(ctx)) alnair_context_charge(ctx, measure(ctx, dev));
}

static void fork_child(void)
{
    pthread_mutex_init(&measure_lock, NULL);
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) context_size[i] = measure_tried[i] = 0;
}
ALNAIR_ON_FORK(context_fork, NULL, NULL, fork_child);

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
        holds(*pctx, dev);
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
    if (r == CUDA_SUCCESS && pctx && alnair_active()) {
        alnair_context_bind(*pctx, dev);
        holds(*pctx, dev);
    }
    return r;
}
