// The wgmma MLA kernel's KV tensor map (see mla_plan.hpp).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "driver/tensor_map.hpp"
#include "ops/mla/mla_plan.hpp"
#include "util/env_knob.hpp"

namespace attnjit::ops {

bool mla_kv_tma_describable(int64_t stride_page, int64_t stride_tok, int page_size) {
  return stride_tok >= mla_const::kHeadDimQk && stride_page >= int64_t(page_size) * stride_tok;
}

void mla_set_kv_map(const MlaArgs& a, MlaPlan& plan) {
  MlaParams& p = plan.params;
  p.kv_tma = 0;
  const spec::KernelSpec& s = plan.spec;
  if (s.backend != spec::Backend::kTrtllmGen || plan.shape.sparse || !p.kv) return;
  const bool fp8 = s.kv_dtype == DType::kFloat8E4M3;
  // fp8 KV has no cp.async path in the wgmma kernel: its map is always built (plan_mla
  // routed views TMA cannot describe to xqa, mla_kv_tma_describable).
  if (!fp8 && util::env_knob("ATTNJIT_MLA_TMA", 0, 1, "0 or 1").value_or(1) == 0) return;
  const uint64_t elem = fp8 ? 1 : 2;
  // plan_mla required a 16-byte aligned base and strides (TMA's rule too); a view whose rows
  // or pages overlap keeps the cp.async path.
  if (!mla_kv_tma_describable(p.kv_stride_page, p.kv_stride_tok, s.page_size)) return;
  driver::TiledTensorMapDesc d;
  d.dtype = fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                : s.kv_dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  d.global = p.kv;
  d.rank = 3;
  d.dims[0] = mla_const::kHeadDimQk;
  d.dims[1] = uint64_t(s.page_size);
  d.dims[2] = uint64_t(a.kv_cache.shape[0]);
  d.strides[0] = uint64_t(p.kv_stride_tok) * elem;
  d.strides[1] = uint64_t(p.kv_stride_page) * elem;
  d.box[0] = 64;  // one of the kernel's column blocks: 128 bytes (one swizzle span), fp8 64 bytes
  d.box[1] = uint32_t(std::min(s.page_size, plan.shape.tile_tokens));  // a page's rows of one tile
  d.box[2] = 1;
  // fp8: dense rows, widened in shared memory (the wide tile); the narrow tile reads them with
  // ldmatrix, whose 64-byte rows want the 64-byte swizzle (mla_hopper_narrow_fp8.cuh).
  d.swizzle = !fp8 ? CU_TENSOR_MAP_SWIZZLE_128B
              : s.has(spec::feature::kNarrowTile) ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE;
  d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const CUtensorMap m = driver::encode_tensor_map_tiled(d);
  static_assert(sizeof(CUtensorMap) == sizeof(MlaTensorMap), "CUtensorMap is 128 bytes");
  std::memcpy(&p.kv_map, &m, sizeof(m));
  p.kv_tma = 1;
}

}  // namespace attnjit::ops
