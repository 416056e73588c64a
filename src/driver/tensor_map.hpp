// Host-built TMA descriptors (CUtensorMap) for Hopper-class kernels: checked here with errors
// that name the argument, encoded by the driver's cuTensorMapEncodeTiled, then passed to the
// kernel inside its __grid_constant__ Params (cp.async.bulk.tensor reads them from there).
#pragma once

#include <cuda.h>  // types only

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attnjit::driver {

constexpr int kMaxTensorMapRank = 5;

// A tiled view of a global tensor. Dimensions run innermost first, as in the driver API.
struct TiledTensorMapDesc {
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const void* global = nullptr;              // device address, 16-byte aligned
  int rank = 2;                              // 1..5
  uint64_t dims[kMaxTensorMapRank] = {};     // elements per dimension
  uint64_t strides[kMaxTensorMapRank] = {};  // bytes; strides[i] steps dimension i+1 (rank-1 of them)
  uint32_t box[kMaxTensorMapRank] = {};      // the tile one copy moves, in elements (<= 256 each)
  uint32_t element_strides[kMaxTensorMapRank] = {1, 1, 1, 1, 1};
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

// A dense row-major 2D tensor (rows x cols, `row_bytes` apart) cut into box_rows x box_cols tiles.
TiledTensorMapDesc tiled_2d(CUtensorMapDataType dtype, const void* global, uint64_t rows, uint64_t cols,
                            uint64_t row_bytes, uint32_t box_rows, uint32_t box_cols,
                            CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE);

// A dense (packed) tensor of 1..5 dims, innermost first, cut into `box` tiles; strides follow
// from the dims. Throws Error(kInvalidArgument) when the two lists differ in length or rank.
TiledTensorMapDesc dense_tiled(CUtensorMapDataType dtype, const void* global, const std::vector<uint64_t>& dims,
                               const std::vector<uint32_t>& box,
                               CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE);

// Bytes per element; throws Error(kUnsupported) for the packed sub-byte types.
size_t tensor_map_element_bytes(CUtensorMapDataType dtype);

// The driver's documented rules (rank, alignment, dims, strides, box, swizzle span), checked on the
// host so that a mistake names its field instead of coming back as CUDA_ERROR_INVALID_VALUE.
// Throws Error(kInvalidArgument). Needs no driver.
void check_tensor_map(const TiledTensorMapDesc& d);

// check_tensor_map, then cuTensorMapEncodeTiled; the thread's last few descriptors are
// remembered, and the same descriptor again returns its map unencoded. Throws
// Error(kNoDevice) without a driver.
CUtensorMap encode_tensor_map_tiled(const TiledTensorMapDesc& d);

}  // namespace attnjit::driver
