// gpu_runtime.h: the one place that maps the HIP runtime API onto CUDA.
//
// GPU sources in this project are written against HIP (hip* names). Built
// with STATECACHE_GPU_HIP they use the HIP headers (hipcc for device code,
// the host compiler with libamdhip64 for host code); built with
// STATECACHE_GPU_CUDA every HIP name used here is #defined to its CUDA
// equivalent, so nvcc (device code) and the host compiler with cudart (host
// code) build the same sources for NVIDIA GPUs. Debian's HIP headers do not
// compile for NVIDIA with CUDA 13, hence this header instead of HIP's own
// nvidia platform.
//
// Only the calls the project uses are mapped: a HIP call missing below fails
// the CUDA build, which is the signal to add it here.
#ifndef STATECACHE_KERNELS_GPU_RUNTIME_H_
#define STATECACHE_KERNELS_GPU_RUNTIME_H_

#if defined(STATECACHE_GPU_HIP) == defined(STATECACHE_GPU_CUDA)
#error "define exactly one of STATECACHE_GPU_HIP and STATECACHE_GPU_CUDA"
#endif

#if defined(STATECACHE_GPU_HIP)

#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP_PLATFORM_HCC__)
#define __HIP_PLATFORM_AMD__ 1
#endif
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#else
#include <hip/hip_runtime_api.h>
#endif
#define STATECACHE_GPU_BACKEND_NAME "hip"

#else  // STATECACHE_GPU_CUDA

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#endif
#define STATECACHE_GPU_BACKEND_NAME "cuda"

// Types and constants.
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipStream_t cudaStream_t
#define hipEvent_t cudaEvent_t
#define hipIpcMemHandle_t cudaIpcMemHandle_t
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipHostMallocDefault cudaHostAllocDefault
#define hipHostMallocMapped cudaHostAllocMapped
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
// Errors.
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
// Devices.
#define hipGetDeviceCount cudaGetDeviceCount
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceSynchronize cudaDeviceSynchronize
// Memory.
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipHostMalloc cudaHostAlloc
#define hipHostFree cudaFreeHost
#define hipHostGetDevicePointer cudaHostGetDevicePointer
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
// Streams and events.
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamDestroy cudaStreamDestroy
#define hipEventCreate cudaEventCreate
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipEventDestroy cudaEventDestroy
// Inter-process memory.
#define hipIpcGetMemHandle cudaIpcGetMemHandle
#define hipIpcOpenMemHandle cudaIpcOpenMemHandle
#define hipIpcCloseMemHandle cudaIpcCloseMemHandle

#endif  // STATECACHE_GPU_CUDA

#endif  // STATECACHE_KERNELS_GPU_RUNTIME_H_
