// Per-request lengths that a launch reads from device memory: one table per (op,
// device, stream), kept for the process, written in stream order before the kernels
// that read it, and safe to capture into a CUDA graph.
#pragma once

#include <cstdint>
#include <cstddef>

#include "driver/cuda_driver.hpp"

namespace attnjit::ops {

// Writes the n `values` into the table of (op, device, stream) and returns its device
// address. Outside capture, one async copy; while capturing, memsets (a captured copy
// would keep the host vector's address; memsets keep their values, so the graph
// replays the lengths of the captured call), one per run of equal values. The table
// grows outside capture only: growing it while the stream captures throws
// Error(kNotPrewarmed) naming `op`. Outgrown buffers are kept: a graph may point at them.
// (int lengths may be passed as their unsigned selves: the two may alias.)
uint32_t* upload_stream_lengths(const char* op, int device, CUstream stream, const uint32_t* values, size_t n);

}  // namespace attnjit::ops
