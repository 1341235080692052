/*
 * hooks_launch.c - every kernel and graph launch path: count it on the calling
 * thread's device, and hold it for its window while the process takes turns (compute_limit.c).
 *
 * The hot path with no limit is: a mode load, a thread-local device lookup and,
 * after the driver accepts the launch, one relaxed atomic add and checks that the
 * process is busy on the device (gpu_time.c) and that the first launch's time is known. No locks, no syscalls, no getenv, no driver calls.
 * The latest launch's time is not taken here (a clock read per launch): the
 * monitor stamps it when it sees the count move (monitor.c).
 */
#include "intercept.h"

/* The calling thread's device; while it takes turns, *turn is the time the
 * launch's turn came (after waiting for it), else 0. */
static inline struct alnair_device *before_launch(uint64_t *turn)
{
    *turn = 0;
    if (!alnair_active()) return NULL;
    struct alnair_device *d = alnair_current_device();
    if (d && alnair_takes_turns(d)) *turn = alnair_wait_for_window(d);
    return d;
}

/* A launch the driver held back (a full queue) waited for the GPU's work: outside the window, overrun. */
static inline void after_launch(struct alnair_device *d, uint64_t turn)
{
    if (ALNAIR_UNLIKELY(turn)) alnair_charge_overrun(d, turn, alnair_monotonic_ns());
}

static inline CUresult count(CUresult r, struct alnair_device *d, _Atomic uint64_t *counter)
{
    if (r == CUDA_SUCCESS && d) {
        atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
        alnair_note_busy(d);
        alnair_note_first(&alnair.first_launch_boottime_ns);
    }
    return r;
}

#define KERNEL_LAUNCH(name, params, args) \
    ALNAIR_EXPORT CUresult name params \
    { \
        uint64_t turn; \
        struct alnair_device *d = before_launch(&turn); \
        CUresult r = CALL_REAL(name, args); \
        after_launch(d, turn); \
        return d ? count(r, d, &d->kernel_launches) : r; \
    }

KERNEL_LAUNCH(cuLaunchKernel, ALNAIR_LAUNCH_PARAMS, ALNAIR_LAUNCH_ARGS)
KERNEL_LAUNCH(cuLaunchKernel_ptsz, ALNAIR_LAUNCH_PARAMS, ALNAIR_LAUNCH_ARGS)
KERNEL_LAUNCH(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
              (config, f, kernelParams, extra))
KERNEL_LAUNCH(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
              (config, f, kernelParams, extra))
KERNEL_LAUNCH(cuLaunchCooperativeKernel, ALNAIR_COOP_PARAMS, ALNAIR_COOP_ARGS)
KERNEL_LAUNCH(cuLaunchCooperativeKernel_ptsz, ALNAIR_COOP_PARAMS, ALNAIR_COOP_ARGS)

#define GRAPH_LAUNCH(name) \
    ALNAIR_EXPORT CUresult name(CUgraphExec hGraphExec, CUstream hStream) \
    { \
        uint64_t turn; \
        struct alnair_device *d = before_launch(&turn); \
        CUresult r = CALL_REAL(name, (hGraphExec, hStream)); \
        after_launch(d, turn); \
        return d ? count(r, d, &d->graph_launches) : r; \
    }

GRAPH_LAUNCH(cuGraphLaunch)
GRAPH_LAUNCH(cuGraphLaunch_ptsz)

/* The device a stream belongs to: asks the driver, so only for this rare,
 * deprecated multi-device form. */
static struct alnair_device *stream_device(CUstream stream)
{
    CUcontext ctx;
    CUdevice dev;
    cuStreamGetCtx_fn get_ctx = REAL(cuStreamGetCtx);
    cuCtxGetCurrent_fn get_current = REAL(cuCtxGetCurrent);
    cuCtxGetDevice_fn get_device = REAL(cuCtxGetDevice);
    cuCtxSetCurrent_fn set_current = REAL(cuCtxSetCurrent);
    CUcontext saved;
    if (!get_ctx || !get_current || !get_device || !set_current) return NULL;
    if (get_ctx(stream, &ctx) != CUDA_SUCCESS || get_current(&saved) != CUDA_SUCCESS) return NULL;
    int ok = set_current(ctx) == CUDA_SUCCESS && get_device(&dev) == CUDA_SUCCESS;
    set_current(saved);
    return ok ? alnair_device_at(dev) : NULL;
}

ALNAIR_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                                             unsigned int numDevices, unsigned int flags)
{
    if (!alnair_active() || !launchParamsList)
        return CALL_REAL(cuLaunchCooperativeKernelMultiDevice, (launchParamsList, numDevices, flags));
    struct alnair_device *devices[ALNAIR_CUDA_MAX_DEVICES] = {0};
    unsigned int n = numDevices < ALNAIR_CUDA_MAX_DEVICES ? numDevices : ALNAIR_CUDA_MAX_DEVICES;
    for (unsigned int i = 0; i < n; i++) {
        devices[i] = stream_device(launchParamsList[i].hStream);
        if (devices[i] && alnair_takes_turns(devices[i])) alnair_wait_for_window(devices[i]);
    }
    CUresult r = CALL_REAL(cuLaunchCooperativeKernelMultiDevice, (launchParamsList, numDevices, flags));
    for (unsigned int i = 0; i < n; i++)
        if (devices[i]) count(r, devices[i], &devices[i]->kernel_launches);
    return r;
}
