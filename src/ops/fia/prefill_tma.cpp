// TMA tensor maps for the wgmma prefill kernel (see prefill_tma.hpp).
#include "ops/fia/prefill_tma.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <optional>

#include "driver/tensor_map.hpp"
#include "ops/fia/prefill_family.hpp"
#include "util/env_knob.hpp"

namespace attnjit::ops {

std::optional<KvMapPlan> plan_kv_map(const void* base, DType dtype, int head_dim, uint64_t heads,
                                     uint64_t tokens, uint64_t batch, long long sb, long long ss, long long sh,
                                     int kv_tile) {
  constexpr uint64_t kElem = 2;
  if ((dtype != DType::kBFloat16 && dtype != DType::kFloat16) || head_dim % 64 != 0) return std::nullopt;
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0 || sb < 0 || ss < 0 || sh < 0) return std::nullopt;
  struct Dim {
    int which;  // 0 head, 1 token, 2 batch
    uint64_t extent, stride_bytes;
  };
  std::array<Dim, 3> dims = {Dim{0, heads, uint64_t(sh) * kElem}, Dim{1, tokens, uint64_t(ss) * kElem},
                             Dim{2, batch, uint64_t(sb) * kElem}};
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& x, const Dim& y) { return x.stride_bytes < y.stride_bytes; });
  KvMapPlan m;
  driver::TiledTensorMapDesc& d = m.desc;
  d.dtype = dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  d.global = base;
  d.rank = 4;
  d.dims[0] = uint64_t(head_dim);
  d.box[0] = 64;  // 128 bytes: one swizzle span
  uint64_t below = uint64_t(head_dim) * kElem;
  for (int i = 0; i < 3; ++i) {
    Dim x = dims[size_t(i)];
    // A dimension of extent 1 (TND's batch) is never stepped: any legal stride serves.
    if (x.extent == 1) x.stride_bytes = std::max(x.stride_bytes, (below + 15) / 16 * 16);
    if (x.extent == 0 || x.stride_bytes % 16 != 0 || x.stride_bytes < below) return std::nullopt;
    d.dims[i + 1] = x.extent;
    d.strides[i] = x.stride_bytes;
    d.box[i + 1] = x.which == 1 ? uint32_t(kv_tile) : 1u;
    m.dim_of[x.which] = i + 1;
    below = x.stride_bytes * x.extent;
  }
  d.swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  return m;
}

void prefill_set_kv_maps(const FiaPlan& plan, const FiaArgs& a, PrefillParams& p) {
  p.kv_tma = 0;
  const spec::KernelSpec& s = plan.spec;
  if (!prefill_tma_capable(s) || !p.k || !p.v) return;
  if (util::env_knob("ATTNJIT_PREFILL_TMA", 0, 1, "0 or 1").value_or(1) == 0) return;
  const int tile = prefill_tiling(s).kv_tile;
  // Paged K/V: a map over (blocks, block_size slots, heads), when whole tiles fit a block (a
  // tile starts at a multiple of its size); otherwise the cp.async gather.
  const bool paged = s.page_size != 0;
  if (paged && s.page_size % tile != 0) return;
  const bool tnd = plan.layout == FiaLayout::kTND;
  const uint64_t tokens = paged ? uint64_t(s.page_size) : tnd ? uint64_t(a.key.shape[0]) : uint64_t(plan.kv_seq);
  const uint64_t batch = paged ? uint64_t(a.key.shape[0]) : tnd ? 1 : uint64_t(plan.batch);
  const uint64_t heads = uint64_t(plan.num_kv_heads);
  const auto k = plan_kv_map(p.k, s.kv_dtype, s.head_dim_qk, heads, tokens, batch, p.k_stride_b, p.k_stride_s,
                             p.k_stride_h, tile);
  const auto v = plan_kv_map(p.v, s.kv_dtype, s.head_dim_vo, heads, tokens, batch, p.v_stride_b, p.v_stride_s,
                             p.v_stride_h, tile);
  // One set of coordinates serves both maps.
  if (!k || !v || !std::equal(k->dim_of, k->dim_of + 3, v->dim_of)) return;
  const CUtensorMap km = driver::encode_tensor_map_tiled(k->desc), vm = driver::encode_tensor_map_tiled(v->desc);
  static_assert(sizeof(CUtensorMap) == sizeof(PrefillTensorMap), "CUtensorMap is 128 bytes");
  std::memcpy(&p.k_map, &km, sizeof(km));
  std::memcpy(&p.v_map, &vm, sizeof(vm));
  const int* k_dim = k->dim_of;
  p.map_dim_h = k_dim[0];
  p.map_dim_s = k_dim[1];
  p.map_dim_b = k_dim[2];
  // A tile past kv_len inside the map reads a row TMA does not zero: gathered instead. Paged,
  // every such tile is (a block's slots past kv_len hold stale rows).
  p.kv_map_tokens = paged ? INT_MAX : int(tokens);
  p.kv_tma = 1;
}

}  // namespace attnjit::ops
