// Internal to src/driver: the table of driver entry points resolved at run time,
// shared by the loader (cuda_driver.cpp) and the helpers (device_memory.cpp).
#pragma once

#include <cudaTypedefs.h>  // PFN_* typedefs: the exact signature of each versioned entry point

#include <atomic>

#include "driver/cuda_driver.hpp"

namespace attnjit::driver::detail {

// name, PFN type (the version valid at kApiVersion).
#define ATTNJIT_DRIVER_ENTRY_POINTS(X)                         \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                  \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)              \
  X(cuInit, PFN_cuInit_v2000)                                  \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)          \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                        \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)              \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000)                \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)      \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v3020)              \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000) \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                \
  X(cuCtxPushCurrent, PFN_cuCtxPushCurrent_v4000)              \
  X(cuCtxPopCurrent, PFN_cuCtxPopCurrent_v4000)                \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                  \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)              \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000)              \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000)                  \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)        \
  X(cuFuncGetAttribute, PFN_cuFuncGetAttribute_v2020)          \
  X(cuFuncSetAttribute, PFN_cuFuncSetAttribute_v9000)          \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)             \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)       \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)        \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000)                  \
  X(cuStreamGetId, PFN_cuStreamGetId_v12000)                   \
  X(cuStreamDestroy, PFN_cuStreamDestroy_v4000)                \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v10010)     \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)         \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040) \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                   \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)         \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000)                 \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020)                          \
  X(cuMemFree, PFN_cuMemFree_v3020)                            \
  X(cuMemcpyHtoD, PFN_cuMemcpyHtoD_v3020)                      \
  X(cuMemcpyHtoDAsync, PFN_cuMemcpyHtoDAsync_v3020)            \
  X(cuMemcpyDtoH, PFN_cuMemcpyDtoH_v3020)                      \
  X(cuMemsetD8, PFN_cuMemsetD8_v3020)                          \
  X(cuMemsetD8Async, PFN_cuMemsetD8Async_v3020)                \
  X(cuMemsetD32, PFN_cuMemsetD32_v3020)                        \
  X(cuMemsetD32Async, PFN_cuMemsetD32Async_v3020)              \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010) \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                    \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                    \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)          \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000)          \
  X(cuEventDestroy, PFN_cuEventDestroy_v4000)                  \
  X(cuModuleGetGlobal, PFN_cuModuleGetGlobal_v3020)            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050) \
  X(cuTensorMapEncodeTiled, PFN_cuTensorMapEncodeTiled_v12000)

// Plain function pointers, written once under g_once and only read afterwards: the launch
// path takes no lock. Everything here is constant-initialized, so no static-init-order issue.
struct Api {
#define ATTNJIT_DECLARE(name, type) type name = nullptr;
  ATTNJIT_DRIVER_ENTRY_POINTS(ATTNJIT_DECLARE)
#undef ATTNJIT_DECLARE
};

extern Api g_api;
extern std::atomic<bool> g_ready;
// Set by an atexit handler: once the process is exiting, libcuda may already be torn down,
// so destructors skip unloading and freeing (the OS reclaims everything anyway).
extern std::atomic<bool> g_exiting;

// The fast check every entry point starts with: one atomic load once the driver is up.
inline void ensure() {
  if (!g_ready.load(std::memory_order_acquire)) require_available();
}
// Makes some context current on this thread (device 0's primary one if none is).
void ensure_context();

}  // namespace attnjit::driver::detail
