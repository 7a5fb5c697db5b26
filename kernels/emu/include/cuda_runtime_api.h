// llmkv's CUDA emulator: the CUDA runtime functions the module and the GPU tests call, with
// the runtime's names, error values and semantics, implemented over host memory by
// libllmkv-cudaemu.so (kernels/emu/runtime.cpp). Devices are emulated (LLMKV_EMU_DEVICES,
// LLMKV_EMU_DEVICE_MIB); every allocation is host memory and addressing is unified.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "vector_types.h"

#define CUDAEMU_API __attribute__((visibility("default")))
#ifdef __cplusplus
#define CUDAEMU_DEFAULT(v) = v  // the stream and flag arguments C++ may leave out, as in CUDA
#else
#define CUDAEMU_DEFAULT(v)
#endif
#define CUDART_VERSION 12000

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidPitchValue = 12,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrUnifiedAddressing = 41,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    int major;
    int minor;
    int multiProcessorCount;
    int unifiedAddressing;
    int memoryBusWidth;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
    size_t sharedMemPerBlockOptin;
};

#ifdef __cplusplus
extern "C" {
#endif

CUDAEMU_API cudaError_t cudaGetDeviceCount(int *count);
CUDAEMU_API cudaError_t cudaGetDevice(int *device);
CUDAEMU_API cudaError_t cudaSetDevice(int device);
CUDAEMU_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
CUDAEMU_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
CUDAEMU_API cudaError_t cudaDeviceSynchronize(void);
CUDAEMU_API cudaError_t cudaDeviceReset(void);
CUDAEMU_API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
CUDAEMU_API cudaError_t cudaGetLastError(void);
CUDAEMU_API cudaError_t cudaPeekAtLastError(void);
CUDAEMU_API const char *cudaGetErrorString(cudaError_t error);
CUDAEMU_API const char *cudaGetErrorName(cudaError_t error);
CUDAEMU_API cudaError_t cudaRuntimeGetVersion(int *version);
CUDAEMU_API cudaError_t cudaDriverGetVersion(int *version);

CUDAEMU_API cudaError_t cudaMalloc(void **ptr, size_t bytes);
CUDAEMU_API cudaError_t cudaFree(void *ptr);
CUDAEMU_API cudaError_t cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags);
CUDAEMU_API cudaError_t cudaMallocHost(void **ptr, size_t bytes);
CUDAEMU_API cudaError_t cudaFreeHost(void *ptr);
CUDAEMU_API cudaError_t cudaHostGetDevicePointer(void **device_ptr, void *host_ptr,
                                                 unsigned int flags);
CUDAEMU_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                                   enum cudaMemcpyKind kind);
CUDAEMU_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                                        enum cudaMemcpyKind kind,
                                        cudaStream_t stream CUDAEMU_DEFAULT(0));
CUDAEMU_API cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
CUDAEMU_API cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes,
                                        cudaStream_t stream CUDAEMU_DEFAULT(0));

CUDAEMU_API cudaError_t cudaStreamCreate(cudaStream_t *stream);
CUDAEMU_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
CUDAEMU_API cudaError_t cudaStreamDestroy(cudaStream_t stream);
CUDAEMU_API cudaError_t cudaStreamSynchronize(cudaStream_t stream);
CUDAEMU_API cudaError_t cudaStreamQuery(cudaStream_t stream);
CUDAEMU_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                            unsigned int flags CUDAEMU_DEFAULT(0));

CUDAEMU_API cudaError_t cudaEventCreate(cudaEvent_t *event);
CUDAEMU_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
CUDAEMU_API cudaError_t cudaEventDestroy(cudaEvent_t event);
CUDAEMU_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream CUDAEMU_DEFAULT(0));
CUDAEMU_API cudaError_t cudaEventSynchronize(cudaEvent_t event);
CUDAEMU_API cudaError_t cudaEventQuery(cudaEvent_t event);
CUDAEMU_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

#ifdef __cplusplus
}  // extern "C"
#endif
