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
typedef struct CUkern_st *CUkernel; /* a context-independent kernel; cuLaunchKernel takes one in place of a CUfunction */
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

/* Stream-ordered memory pools: the attributes read, and the properties' device. */
typedef int CUmemPool_attribute;
typedef int CUstreamCaptureStatus; /* 0: not capturing */
#define CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4
#define CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT 5
#define CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH 6
#define CU_MEMPOOL_ATTR_USED_MEM_CURRENT 7
#define CU_MEMPOOL_ATTR_USED_MEM_HIGH 8
typedef struct CUmemPoolProps_st {
    int allocType;
    int handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;

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

/* What cuMemcpy2D/3D say each end is. */
typedef int CUmemorytype;
#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMORYTYPE_ARRAY 3
#define CU_MEMORYTYPE_UNIFIED 4

typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

typedef struct CUDA_MEMCPY3D_PEER_st {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    CUcontext srcContext;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    CUcontext dstContext;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D_PEER;

typedef struct CUmemcpyAttributes_st CUmemcpyAttributes; /* passed through, never read */

typedef struct CUoffset3D_st {
    size_t x, y, z;
} CUoffset3D;

typedef struct CUextent3D_st {
    size_t width, height, depth;
} CUextent3D;

#define CU_MEMCPY_OPERAND_TYPE_POINTER 1
#define CU_MEMCPY_OPERAND_TYPE_ARRAY 2
typedef struct CUmemcpy3DOperand_st {
    int type;
    union {
        struct {
            CUdeviceptr ptr;
            size_t rowLength, layerHeight;
            CUmemLocation locHint;
        } ptr;
        struct {
            CUarray array;
            CUoffset3D offset;
        } array;
    } op;
} CUmemcpy3DOperand;

typedef struct CUDA_MEMCPY3D_BATCH_OP_st {
    CUmemcpy3DOperand src, dst;
    CUextent3D extent;
    int srcAccessOrder;
    unsigned int flags;
} CUDA_MEMCPY3D_BATCH_OP;

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

/* The copy entry points' parameters, one pair per family of signatures. */
#define ALNAIR_COPY_UNIFIED_PARAMS (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
#define ALNAIR_COPY_UNIFIED_ARGS (dst, src, ByteCount)
#define ALNAIR_COPY_UNIFIED_ASYNC_PARAMS (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
#define ALNAIR_COPY_UNIFIED_ASYNC_ARGS (dst, src, ByteCount, hStream)
#define ALNAIR_COPY_PEER_PARAMS \
    (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
#define ALNAIR_COPY_PEER_ARGS (dstDevice, dstContext, srcDevice, srcContext, ByteCount)
#define ALNAIR_COPY_PEER_ASYNC_PARAMS \
    (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount, \
     CUstream hStream)
#define ALNAIR_COPY_PEER_ASYNC_ARGS (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream)
#define ALNAIR_COPY_HTOD_PARAMS (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
#define ALNAIR_COPY_HTOD_ARGS (dstDevice, srcHost, ByteCount)
#define ALNAIR_COPY_HTOD_ASYNC_PARAMS (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
#define ALNAIR_COPY_HTOD_ASYNC_ARGS (dstDevice, srcHost, ByteCount, hStream)
#define ALNAIR_COPY_DTOH_PARAMS (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
#define ALNAIR_COPY_DTOH_ARGS (dstHost, srcDevice, ByteCount)
#define ALNAIR_COPY_DTOH_ASYNC_PARAMS (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
#define ALNAIR_COPY_DTOH_ASYNC_ARGS (dstHost, srcDevice, ByteCount, hStream)
#define ALNAIR_COPY_DTOD_PARAMS (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
#define ALNAIR_COPY_DTOD_ARGS (dstDevice, srcDevice, ByteCount)
#define ALNAIR_COPY_DTOD_ASYNC_PARAMS (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
#define ALNAIR_COPY_DTOD_ASYNC_ARGS (dstDevice, srcDevice, ByteCount, hStream)
#define ALNAIR_COPY_DTOA_PARAMS (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)
#define ALNAIR_COPY_DTOA_ARGS (dstArray, dstOffset, srcDevice, ByteCount)
#define ALNAIR_COPY_ATOD_PARAMS (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)
#define ALNAIR_COPY_ATOD_ARGS (dstDevice, srcArray, srcOffset, ByteCount)
#define ALNAIR_COPY_HTOA_PARAMS (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
#define ALNAIR_COPY_HTOA_ARGS (dstArray, dstOffset, srcHost, ByteCount)
#define ALNAIR_COPY_HTOA_ASYNC_PARAMS \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream hStream)
#define ALNAIR_COPY_HTOA_ASYNC_ARGS (dstArray, dstOffset, srcHost, ByteCount, hStream)
#define ALNAIR_COPY_ATOH_PARAMS (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
#define ALNAIR_COPY_ATOH_ARGS (dstHost, srcArray, srcOffset, ByteCount)
#define ALNAIR_COPY_ATOH_ASYNC_PARAMS \
    (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream)
#define ALNAIR_COPY_ATOH_ASYNC_ARGS (dstHost, srcArray, srcOffset, ByteCount, hStream)
#define ALNAIR_COPY_ATOA_PARAMS \
    (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount)
#define ALNAIR_COPY_ATOA_ARGS (dstArray, dstOffset, srcArray, srcOffset, ByteCount)
#define ALNAIR_COPY_2D_PARAMS (const CUDA_MEMCPY2D *pCopy)
#define ALNAIR_COPY_2D_ARGS (pCopy)
#define ALNAIR_COPY_2D_ASYNC_PARAMS (const CUDA_MEMCPY2D *pCopy, CUstream hStream)
#define ALNAIR_COPY_2D_ASYNC_ARGS (pCopy, hStream)
#define ALNAIR_COPY_3D_PARAMS (const CUDA_MEMCPY3D *pCopy)
#define ALNAIR_COPY_3D_ARGS (pCopy)
#define ALNAIR_COPY_3D_ASYNC_PARAMS (const CUDA_MEMCPY3D *pCopy, CUstream hStream)
#define ALNAIR_COPY_3D_ASYNC_ARGS (pCopy, hStream)
#define ALNAIR_COPY_3D_PEER_PARAMS (const CUDA_MEMCPY3D_PEER *pCopy)
#define ALNAIR_COPY_3D_PEER_ARGS (pCopy)
#define ALNAIR_COPY_3D_PEER_ASYNC_PARAMS (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
#define ALNAIR_COPY_3D_PEER_ASYNC_ARGS (pCopy, hStream)
/* CUDA 12.8's batched copies report the failing copy's index; CUDA 13's _v2 forms dropped it. */
#define ALNAIR_COPY_BATCH_12080_PARAMS \
    (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, \
     size_t numAttrs, size_t *failIdx, CUstream hStream)
#define ALNAIR_COPY_BATCH_12080_ARGS (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream)
#define ALNAIR_COPY_BATCH_PARAMS \
    (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs, \
     size_t numAttrs, CUstream hStream)
#define ALNAIR_COPY_BATCH_ARGS (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream)
#define ALNAIR_COPY_BATCH_3D_12080_PARAMS \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags, CUstream hStream)
#define ALNAIR_COPY_BATCH_3D_12080_ARGS (numOps, opList, failIdx, flags, hStream)
#define ALNAIR_COPY_BATCH_3D_PARAMS \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream)
#define ALNAIR_COPY_BATCH_3D_ARGS (numOps, opList, flags, hStream)

/*
 * The copy entry points: R(X, name, family, kind), one row each. The family names
 * the parameters above (and, in hooks_copy.c, which end of the copy is where); the
 * kind says how it is counted: SYNC (timed), ASYNC, or BATCH (many copies a call).
 * Only the 64-bit (_v2 and later) names: the v1 ones take 32-bit device pointers,
 * which no 64-bit program can use. _ptds/_ptsz are the per-thread default stream forms.
 */
#define ALNAIR_COPY_HOOKS(R, X) \
    R(X, cuMemcpy, UNIFIED, SYNC) R(X, cuMemcpy_ptds, UNIFIED, SYNC) \
    R(X, cuMemcpyAsync, UNIFIED_ASYNC, ASYNC) R(X, cuMemcpyAsync_ptsz, UNIFIED_ASYNC, ASYNC) \
    R(X, cuMemcpyPeer, PEER, SYNC) R(X, cuMemcpyPeer_ptds, PEER, SYNC) \
    R(X, cuMemcpyPeerAsync, PEER_ASYNC, ASYNC) R(X, cuMemcpyPeerAsync_ptsz, PEER_ASYNC, ASYNC) \
    R(X, cuMemcpyHtoD_v2, HTOD, SYNC) R(X, cuMemcpyHtoD_v2_ptds, HTOD, SYNC) \
    R(X, cuMemcpyHtoDAsync_v2, HTOD_ASYNC, ASYNC) R(X, cuMemcpyHtoDAsync_v2_ptsz, HTOD_ASYNC, ASYNC) \
    R(X, cuMemcpyDtoH_v2, DTOH, SYNC) R(X, cuMemcpyDtoH_v2_ptds, DTOH, SYNC) \
    R(X, cuMemcpyDtoHAsync_v2, DTOH_ASYNC, ASYNC) R(X, cuMemcpyDtoHAsync_v2_ptsz, DTOH_ASYNC, ASYNC) \
    R(X, cuMemcpyDtoD_v2, DTOD, SYNC) R(X, cuMemcpyDtoD_v2_ptds, DTOD, SYNC) \
    R(X, cuMemcpyDtoDAsync_v2, DTOD_ASYNC, ASYNC) R(X, cuMemcpyDtoDAsync_v2_ptsz, DTOD_ASYNC, ASYNC) \
    R(X, cuMemcpyDtoA_v2, DTOA, SYNC) R(X, cuMemcpyDtoA_v2_ptds, DTOA, SYNC) \
    R(X, cuMemcpyAtoD_v2, ATOD, SYNC) R(X, cuMemcpyAtoD_v2_ptds, ATOD, SYNC) \
    R(X, cuMemcpyHtoA_v2, HTOA, SYNC) R(X, cuMemcpyHtoA_v2_ptds, HTOA, SYNC) \
    R(X, cuMemcpyHtoAAsync_v2, HTOA_ASYNC, ASYNC) R(X, cuMemcpyHtoAAsync_v2_ptsz, HTOA_ASYNC, ASYNC) \
    R(X, cuMemcpyAtoH_v2, ATOH, SYNC) R(X, cuMemcpyAtoH_v2_ptds, ATOH, SYNC) \
    R(X, cuMemcpyAtoHAsync_v2, ATOH_ASYNC, ASYNC) R(X, cuMemcpyAtoHAsync_v2_ptsz, ATOH_ASYNC, ASYNC) \
    R(X, cuMemcpyAtoA_v2, ATOA, SYNC) R(X, cuMemcpyAtoA_v2_ptds, ATOA, SYNC) \
    R(X, cuMemcpy2D_v2, 2D, SYNC) R(X, cuMemcpy2D_v2_ptds, 2D, SYNC) \
    R(X, cuMemcpy2DUnaligned_v2, 2D, SYNC) R(X, cuMemcpy2DUnaligned_v2_ptds, 2D, SYNC) \
    R(X, cuMemcpy2DAsync_v2, 2D_ASYNC, ASYNC) R(X, cuMemcpy2DAsync_v2_ptsz, 2D_ASYNC, ASYNC) \
    R(X, cuMemcpy3D_v2, 3D, SYNC) R(X, cuMemcpy3D_v2_ptds, 3D, SYNC) \
    R(X, cuMemcpy3DAsync_v2, 3D_ASYNC, ASYNC) R(X, cuMemcpy3DAsync_v2_ptsz, 3D_ASYNC, ASYNC) \
    R(X, cuMemcpy3DPeer, 3D_PEER, SYNC) R(X, cuMemcpy3DPeer_ptds, 3D_PEER, SYNC) \
    R(X, cuMemcpy3DPeerAsync, 3D_PEER_ASYNC, ASYNC) R(X, cuMemcpy3DPeerAsync_ptsz, 3D_PEER_ASYNC, ASYNC) \
    R(X, cuMemcpyBatchAsync, BATCH_12080, BATCH) R(X, cuMemcpyBatchAsync_ptsz, BATCH_12080, BATCH) \
    R(X, cuMemcpyBatchAsync_v2, BATCH, BATCH) R(X, cuMemcpyBatchAsync_v2_ptsz, BATCH, BATCH) \
    R(X, cuMemcpy3DBatchAsync, BATCH_3D_12080, BATCH) R(X, cuMemcpy3DBatchAsync_ptsz, BATCH_3D_12080, BATCH) \
    R(X, cuMemcpy3DBatchAsync_v2, BATCH_3D, BATCH) R(X, cuMemcpy3DBatchAsync_v2_ptsz, BATCH_3D, BATCH)

/* A copy row as a row of the hook table. */
#define ALNAIR_COPY_ROW(X, name, family, kind) X(name, ALNAIR_COPY_##family##_PARAMS, ALNAIR_COPY_##family##_ARGS)

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
    X(cuMemPoolCreate, (CUmemoryPool *pool, const CUmemPoolProps *poolProps), (pool, poolProps)) \
    X(cuMemPoolDestroy, (CUmemoryPool pool), (pool)) \
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
    /* where virtual memory management maps device memory: copies there are device copies */ \
    X(cuMemMap, \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags), \
      (ptr, size, offset, handle, flags)) \
    X(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size)) \
    /* copies: their own table */ \
    ALNAIR_COPY_HOOKS(ALNAIR_COPY_ROW, X) \
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
    X(cuDeviceGetUuid_v2, (CUuuid *uuid, CUdevice dev), (uuid, dev)) \
    X(cuArray3DGetDescriptor_v2, (CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray), (pArrayDescriptor, hArray)) \
    X(cuDeviceGetMemPool, (CUmemoryPool *pool, CUdevice dev), (pool, dev)) \
    X(cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value), (pool, attr, value)) \
    X(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep), (pool, minBytesToKeep)) \
    X(cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus *captureStatus), (hStream, captureStatus)) \
    X(cuStreamIsCapturing_ptsz, (CUstream hStream, CUstreamCaptureStatus *captureStatus), (hStream, captureStatus)) \
    X(cuFuncGetName, (const char **name, CUfunction hfunc), (name, hfunc)) \
    X(cuKernelGetName, (const char **name, CUkernel hfunc), (name, hfunc))

#endif
