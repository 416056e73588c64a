// The wgmma MLA kernel's KV tensor map (see mla_plan.hpp).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "driver/tensor_map.hpp"
#include "ops/mla/mla_plan.hpp"
#include "util/env_knob.hpp"

namespace attnjit::ops {

void mla_set_kv_map(const MlaArgs& a, MlaPlan& plan) {
  MlaParams& p = plan.params;
  p.kv_tma = 0;
  const spec::KernelSpec& s = plan.spec;
  if (s.backend != spec::Backend::kTrtllmGen || plan.shape.sparse || !p.kv) return;
  if (util::env_knob("ATTNJIT_MLA_TMA", 0, 1, "0 or 1").value_or(1) == 0) return;
  constexpr uint64_t kElem = 2;  // the kernel reads 16-bit KV
  // plan_mla required a 16-byte aligned base and strides (TMA's rule too); a view whose rows
  // or pages overlap keeps the cp.async path.
  if (p.kv_stride_tok < mla_const::kHeadDimQk || p.kv_stride_page < int64_t(s.page_size) * p.kv_stride_tok) return;
  driver::TiledTensorMapDesc d;
  d.dtype = s.kv_dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  d.global = p.kv;
  d.rank = 3;
  d.dims[0] = mla_const::kHeadDimQk;
  d.dims[1] = uint64_t(s.page_size);
  d.dims[2] = uint64_t(a.kv_cache.shape[0]);
  d.strides[0] = uint64_t(p.kv_stride_tok) * kElem;
  d.strides[1] = uint64_t(p.kv_stride_page) * kElem;
  d.box[0] = 64;  // 128 bytes: one swizzle span, one of the kernel's column blocks
  d.box[1] = uint32_t(std::min(s.page_size, mla_const::kHopperTile));
  d.box[2] = 1;
  d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const CUtensorMap m = driver::encode_tensor_map_tiled(d);
  static_assert(sizeof(CUtensorMap) == sizeof(MlaTensorMap), "CUtensorMap is 128 bytes");
  std::memcpy(&p.kv_map, &m, sizeof(m));
  p.kv_tma = 1;
}

}  // namespace attnjit::ops
