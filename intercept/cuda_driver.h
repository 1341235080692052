/*
 * cuda_driver.h - the few CUDA driver types the intercept needs, and the hook table.
 *
 * Declared here so the library builds with gcc alone, without the CUDA toolkit.
 * tests/intercept/test_hook_table.py checks every row's signature against the
 * toolkit's cuda.h where one is installed, and the struct layouts we read.
 */
#ifndef ALNAIR_CUDA_DRIVER_H
#define ALNAIR_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* With the toolkit's cuda.h included first (as the tests do), its types win. */
#ifndef __cuda_cuda_h__
typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_SUPPORTED 801

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUctxCreateParams_st CUctxCreateParams;
typedef struct CUlaunchAttribute_st CUlaunchAttribute;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
typedef int CUdriverProcAddressQueryResult;
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (1 << 1)

#define CU_MEM_LOCATION_TYPE_DEVICE 1
typedef struct CUmemLocation_st {
    int type;
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    int Format;
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format;
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef struct CUDA_LAUNCH_PARAMS_st {
    CUfunction function;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    void **kernelParams;
} CUDA_LAUNCH_PARAMS;
#endif /* __cuda_cuda_h__ */

#define ALNAIR_LAUNCH_PARAMS \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
#define ALNAIR_LAUNCH_ARGS \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams, extra)
#define ALNAIR_COOP_PARAMS \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
#define ALNAIR_COOP_ARGS \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams)

/*
 * The hook table: X(name, parameters, arguments), one row per driver entry point
 * the library wraps. Each row gets a real-function slot, an exported wrapper of
 * the same name, and an entry in the registry that dlsym and cuGetProcAddress use.
 */
#define ALNAIR_HOOKS(X) \
    /* launches */ \
    X(cuLaunchKernel, ALNAIR_LAUNCH_PARAMS, ALNAIR_LAUNCH_ARGS) \
    X(cuLaunchKernel_ptsz, ALNAIR_LAUNCH_PARAMS, ALNAIR_LAUNCH_ARGS) \
    X(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), \
      (config, f, kernelParams, extra)) \
    X(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), \
      (config, f, kernelParams, extra)) \
    X(cuLaunchCooperativeKernel, ALNAIR_COOP_PARAMS, ALNAIR_COOP_ARGS) \
    X(cuLaunchCooperativeKernel_ptsz, ALNAIR_COOP_PARAMS, ALNAIR_COOP_ARGS) \
    X(cuLaunchCooperativeKernelMultiDevice, \
      (CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices, unsigned int flags), \
      (launchParamsList, numDevices, flags)) \
    X(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    X(cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    /* allocation and free */ \
    X(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize)) \
    X(cuMemAllocPitch_v2, \
      (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes), \
      (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes)) \
    X(cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags)) \
    X(cuMemFree_v2, (CUdeviceptr dptr), (dptr)) \
    X(cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream)) \
    X(cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream)) \
    X(cuMemAllocFromPoolAsync, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), \
      (dptr, bytesize, pool, hStream)) \
    X(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), \
      (dptr, bytesize, pool, hStream)) \
    X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream)) \
    X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream)) \
    X(cuMemCreate, \
      (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags), \
      (handle, size, prop, flags)) \
    X(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle)) \
    X(cuArrayCreate_v2, (CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray), (pHandle, pAllocateArray)) \
    X(cuArray3DCreate_v2, (CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray), (pHandle, pAllocateArray)) \
    X(cuArrayDestroy, (CUarray hArray), (hArray)) \
    X(cuMipmappedArrayCreate, \
      (CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc, unsigned int numMipmapLevels), \
      (pHandle, pMipmappedArrayDesc, numMipmapLevels)) \
    X(cuMipmappedArrayDestroy, (CUmipmappedArray hMipmappedArray), (hMipmappedArray)) \
    /* waits for the GPU: a compute-limited process is charged for work that ran past its window */ \
    X(cuCtxSynchronize, (void), ()) \
    X(cuCtxSynchronize_v2, (CUcontext ctx), (ctx)) \
    X(cuStreamSynchronize, (CUstream hStream), (hStream)) \
    X(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream)) \
    X(cuEventSynchronize, (CUevent hEvent), (hEvent)) \
    /* what frameworks size their pools by */ \
    X(cuMemGetInfo_v2, (size_t *free, size_t *total), (free, total)) \
    X(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev), (bytes, dev)) \
    /* which device the calling thread works on */ \
    X(cuCtxSetCurrent, (CUcontext ctx), (ctx)) \
    X(cuCtxPushCurrent_v2, (CUcontext ctx), (ctx)) \
    X(cuCtxPopCurrent_v2, (CUcontext *pctx), (pctx)) \
    X(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev)) \
    X(cuCtxCreate_v4, (CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev), \
      (pctx, ctxCreateParams, flags, dev)) \
    X(cuCtxDestroy_v2, (CUcontext ctx), (ctx)) \
    X(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev), (pctx, dev)) \
    /* how the CUDA runtime finds every other entry point */ \
    X(cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags), \
      (symbol, pfn, cudaVersion, flags)) \
    X(cuGetProcAddress_v2, \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus), \
      (symbol, pfn, cudaVersion, flags, symbolStatus))

/* Driver functions the library calls but does not wrap. */
#define ALNAIR_HELPERS(X) \
    X(cuCtxGetCurrent, (CUcontext *pctx), (pctx)) \
    X(cuCtxGetDevice, (CUdevice *device), (device)) \
    X(cuStreamGetCtx, (CUstream hStream, CUcontext *pctx), (hStream, pctx)) \
    X(cuDeviceGetUuid_v2, (CUuuid *uuid, CUdevice dev), (uuid, dev))

#endif
