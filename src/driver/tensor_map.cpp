// TMA descriptor checks and encoding (see tensor_map.hpp).
#include "driver/tensor_map.hpp"

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "driver/driver_api.hpp"

namespace attnjit::driver {

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& expected, const std::string& given) {
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("tensor map: {}: expected {}, given {}", field, expected, given));
}

// The inner box span each swizzle mode allows, in bytes (0: no limit).
uint64_t swizzle_span(CUtensorMapSwizzle s) {
  switch (s) {
    case CU_TENSOR_MAP_SWIZZLE_NONE: return 0;
    case CU_TENSOR_MAP_SWIZZLE_32B: return 32;
    case CU_TENSOR_MAP_SWIZZLE_64B: return 64;
    default: return 128;  // the 128B modes (and their 32B/64B-atom variants)
  }
}

}  // namespace

size_t tensor_map_element_bytes(CUtensorMapDataType dtype) {
  switch (dtype) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("tensor map: dtype {}: the packed sub-byte types are not supported here",
                              static_cast<int>(dtype)));
  }
}

TiledTensorMapDesc tiled_2d(CUtensorMapDataType dtype, const void* global, uint64_t rows, uint64_t cols,
                            uint64_t row_bytes, uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  TiledTensorMapDesc d;
  d.dtype = dtype;
  d.global = global;
  d.rank = 2;
  d.dims[0] = cols;
  d.dims[1] = rows;
  d.strides[0] = row_bytes;
  d.box[0] = box_cols;
  d.box[1] = box_rows;
  d.swizzle = swizzle;
  return d;
}

TiledTensorMapDesc dense_tiled(CUtensorMapDataType dtype, const void* global, const std::vector<uint64_t>& dims,
                               const std::vector<uint32_t>& box, CUtensorMapSwizzle swizzle) {
  if (dims.empty() || dims.size() > kMaxTensorMapRank)
    bad("dims", fmt::format("1..{} dimensions", kMaxTensorMapRank), std::to_string(dims.size()));
  if (box.size() != dims.size())
    bad("box", fmt::format("{} extents (one per dim)", dims.size()), std::to_string(box.size()));
  TiledTensorMapDesc d;
  d.dtype = dtype;
  d.global = global;
  d.rank = static_cast<int>(dims.size());
  d.swizzle = swizzle;
  uint64_t stride = tensor_map_element_bytes(dtype);
  for (int i = 0; i < d.rank; ++i) {
    d.dims[i] = dims[i];
    d.box[i] = box[i];
    stride *= dims[i];
    if (i + 1 < d.rank) d.strides[i] = stride;
  }
  return d;
}

void check_tensor_map(const TiledTensorMapDesc& d) {
  const bool interleaved = d.interleave != CU_TENSOR_MAP_INTERLEAVE_NONE;
  const int min_rank = interleaved ? 3 : 1;
  if (d.rank < min_rank || d.rank > kMaxTensorMapRank)
    bad("rank", fmt::format("{}..{}{}", min_rank, kMaxTensorMapRank, interleaved ? " (interleaved)" : ""),
        std::to_string(d.rank));
  const uint64_t elem = tensor_map_element_bytes(d.dtype);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(d.global);
  const uintptr_t align = d.interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  if (addr == 0 || addr % align != 0)
    bad("global", fmt::format("a non-null address aligned to {} bytes", align), fmt::format("{:#x}", addr));
  for (int i = 0; i < d.rank; ++i) {
    if (d.dims[i] == 0 || d.dims[i] > (uint64_t{1} << 32))
      bad(fmt::format("dims[{}]", i), "1..2^32 elements", std::to_string(d.dims[i]));
    if (d.box[i] == 0 || d.box[i] > 256) bad(fmt::format("box[{}]", i), "1..256 elements", std::to_string(d.box[i]));
    if (d.element_strides[i] == 0 || d.element_strides[i] > 8)
      bad(fmt::format("element_strides[{}]", i), "1..8", std::to_string(d.element_strides[i]));
  }
  // strides[i] steps dimension i+1; each spans at least the dimension below it.
  const uint64_t stride_align = d.interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  uint64_t below = d.dims[0] * elem;
  for (int i = 0; i + 1 < d.rank; ++i) {
    const uint64_t s = d.strides[i];
    if (s % stride_align != 0 || s >= (uint64_t{1} << 40))
      bad(fmt::format("strides[{}]", i), fmt::format("a multiple of {} bytes below 2^40", stride_align),
          std::to_string(s));
    if (s < below)
      bad(fmt::format("strides[{}]", i), fmt::format("at least {} bytes (the extent of the dimension below)", below),
          std::to_string(s));
    below = s * d.dims[i + 1];
  }
  const uint64_t inner_bytes = uint64_t{d.box[0]} * elem;
  if (!interleaved && inner_bytes % 16 != 0)
    bad("box[0]", "a row of a multiple of 16 bytes", fmt::format("{} elements = {} bytes", d.box[0], inner_bytes));
  if (d.interleave == CU_TENSOR_MAP_INTERLEAVE_32B && d.swizzle != CU_TENSOR_MAP_SWIZZLE_32B)
    bad("swizzle", "CU_TENSOR_MAP_SWIZZLE_32B with 32B interleave", std::to_string(static_cast<int>(d.swizzle)));
  const uint64_t span = swizzle_span(d.swizzle);
  if (!interleaved && span && inner_bytes > span)
    bad("box[0]", fmt::format("at most {} bytes per row under a {}-byte swizzle", span, span),
        fmt::format("{} elements = {} bytes", d.box[0], inner_bytes));
  const bool is_float = d.dtype == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || d.dtype == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
                        d.dtype == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 || d.dtype == CU_TENSOR_MAP_DATA_TYPE_FLOAT64 ||
                        d.dtype == CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ || d.dtype == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 ||
                        d.dtype == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
  if (d.oob_fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE && !is_float)
    bad("oob_fill", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE for an integer dtype", "the NaN fill");
}

namespace {

bool same_desc(const TiledTensorMapDesc& a, const TiledTensorMapDesc& b) {
  if (a.dtype != b.dtype || a.global != b.global || a.rank != b.rank || a.interleave != b.interleave ||
      a.swizzle != b.swizzle || a.l2_promotion != b.l2_promotion || a.oob_fill != b.oob_fill)
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i] || a.box[i] != b.box[i] || a.element_strides[i] != b.element_strides[i] ||
        (i + 1 < a.rank && a.strides[i] != b.strides[i]))
      return false;
  return true;
}

CUtensorMap encode_uncached(const TiledTensorMapDesc& d) {
  check_tensor_map(d);
  detail::ensure();
  CUtensorMap map{};  // CUtensorMap is declared 64-byte aligned, as the driver requires
  cuuint64_t dims[kMaxTensorMapRank], strides[kMaxTensorMapRank];
  cuuint32_t box[kMaxTensorMapRank], estrides[kMaxTensorMapRank];
  for (int i = 0; i < d.rank; ++i) {
    dims[i] = d.dims[i];
    strides[i] = d.strides[i];
    box[i] = d.box[i];
    estrides[i] = d.element_strides[i];
  }
  const CUresult r = detail::g_api.cuTensorMapEncodeTiled(&map, d.dtype, static_cast<cuuint32_t>(d.rank),
                                                          const_cast<void*>(d.global), dims, strides, box, estrides,
                                                          d.interleave, d.swizzle, d.l2_promotion, d.oob_fill);
  if (r != CUDA_SUCCESS)  // (the message is built only on failure: this runs on every launch)
    check(r, fmt::format("cuTensorMapEncodeTiled(rank {}, dtype {}, swizzle {})", d.rank, static_cast<int>(d.dtype),
                         static_cast<int>(d.swizzle))
                 .c_str());
  return map;
}

}  // namespace

CUtensorMap encode_tensor_map_tiled(const TiledTensorMapDesc& d) {
  // An engine launches over the same cache tensors layer after layer, and an encode costs
  // about 0.3 us (H100 host, PERFORMANCE.md): the last few maps each thread encoded are kept.
  // A map is a pure function of its descriptor (no context, no device state).
  struct Entry {
    TiledTensorMapDesc desc;
    CUtensorMap map;
    bool valid = false;
  };
  constexpr int kEntries = 4;
  thread_local Entry cache[kEntries];
  thread_local int next = 0;
  for (const Entry& e : cache)
    if (e.valid && same_desc(e.desc, d)) return e.map;
  const CUtensorMap map = encode_uncached(d);  // throws before a bad descriptor is kept
  Entry& e = cache[next];
  next = (next + 1) % kEntries;
  e.desc = d;
  e.map = map;
  e.valid = true;
  return map;
}

}  // namespace attnjit::driver
