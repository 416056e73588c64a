// Valid fused_infer_attention_score calls with quantised K/V (int8, int4 in int32) and
// their antiquant scales, or with int8 Q/K/V (the full int8 path), for the CPU tests of
// fia_plan_antiquant.cpp, fia_plan_extras.cpp and the op fuzzer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_args.hpp"

namespace attnjit::testing {

// A view at `at` with this shape; padded: strides that are not row-major (the last 2,
// every other one row-major plus 3), so each dim's stride is distinct.
inline TensorView aq_view(uintptr_t at, DType dt, const std::vector<int64_t>& shape, bool padded = false) {
  TensorView t;
  t.data = fake(at);
  t.dtype = dt;
  t.rank = int(shape.size());
  int64_t st = padded ? 2 : 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[size_t(d)];
    t.stride[d] = st;
    st = st * shape[size_t(d)] + (padded ? 3 : 0);
  }
  return t;
}

// Replaces valid_fia's K/V (BSND (2, 256, 2, 128)) with int8, or int4 packed in int32
// (last dim D / 8 = 16).
inline void quantise_kv(FiaArgs& a, DType kv) {
  const int64_t last = kv == DType::kInt32 ? kHd / 8 : kHd;
  a.key = aq_view(0x100000, kv, {kFiaBatch, kFiaKvSeq, kFiaKvHeads, last});
  a.value = aq_view(0x200000, kv, {kFiaBatch, kFiaKvSeq, kFiaKvHeads, last});
}

// valid_fia(q_seq) with a query (and output) of dtype q, quantised K/V and separate params
// of these modes and shapes (fp32 for the per-token modes, q otherwise), offsets when asked.
inline FiaArgs separate_kv(int q_seq, DType kv, int key_mode, const std::vector<int64_t>& kshape, int value_mode,
                           const std::vector<int64_t>& vshape, bool offsets = true, DType q = DType::kBFloat16) {
  FiaArgs a = valid_fia(q_seq);
  a.query.dtype = a.attention_out.dtype = q;
  quantise_kv(a, kv);
  auto dt = [&](int mode) { return mode == 0 || mode == 2 ? a.query.dtype : DType::kFloat32; };
  a.key_antiquant_mode = key_mode;
  a.value_antiquant_mode = value_mode;
  a.key_antiquant_scale = aq_view(0x1000000, dt(key_mode), kshape, true);
  a.value_antiquant_scale = aq_view(0x2000000, dt(value_mode), vshape, true);
  if (offsets) {
    a.key_antiquant_offset = aq_view(0x3000000, dt(key_mode), kshape, true);
    a.value_antiquant_offset = aq_view(0x4000000, dt(value_mode), vshape, true);
  }
  return a;
}

// The page-managed variant: K/V (8 blocks, block_size, H), a (2, 4) block table, lengths
// {3 * block_size, 5} (valid_fia's q_seq).
inline void page_kv(FiaArgs& a, int block_size) {
  const DType kv = a.key.dtype;
  const int64_t h = kFiaKvHeads * (kv == DType::kInt32 ? kHd / 8 : kHd);
  a.key = aq_view(0x100000, kv, {8, block_size, h});
  a.value = aq_view(0x200000, kv, {8, block_size, h});
  a.block_table = aq_view(0x300000, DType::kInt32, {kFiaBatch, 4});
  a.block_size = block_size;
  a.actual_seq_lengths_kv = {int64_t(block_size) * 3, 5};
}

// fp16 query, int8 K/V and the combined antiquant_scale (+ offset) in `layout` (BSH,
// BSND or BNSD): B 2, N 8 over 2, D 128, KV_S 256.
inline FiaArgs combined_kv(int q_seq, const std::string& layout, const std::vector<int64_t>& shape,
                           DType scale_dt = DType::kFloat16, bool offset = true) {
  FiaArgs a;
  const int64_t B = kFiaBatch, N = kFiaHeads, KN = kFiaKvHeads, D = kHd, S = q_seq, KS = kFiaKvSeq;
  auto shaped = [&](int64_t n, int64_t s) -> std::vector<int64_t> {
    if (layout == "BSH") return {B, s, n * D};
    if (layout == "BNSD") return {B, n, s, D};
    return {B, s, n, D};
  };
  a.input_layout = layout;
  a.num_heads = N;
  a.num_key_value_heads = KN;
  a.scale = 0.088;
  a.query = aq_view(0x10000, DType::kFloat16, shaped(N, S));
  a.key = aq_view(0x100000, DType::kInt8, shaped(KN, KS));
  a.value = aq_view(0x200000, DType::kInt8, shaped(KN, KS));
  a.attention_out = aq_view(0x400000, DType::kFloat16, shaped(N, S));
  a.antiquant_scale = aq_view(0x1000000, scale_dt, shape, true);
  if (offset) a.antiquant_offset = aq_view(0x3000000, scale_dt, shape, true);
  return a;
}

// The full int8 path: valid_fia(q_seq)'s shapes (BSND, B 2, N 8 over 2, D 128) with int8
// query, key and value, fp16 output, and the per-tensor fp32 dequant_scale1,
// quant_scale1 and dequant_scale2.
inline FiaArgs int8_qkv(int q_seq = 64) {
  FiaArgs a = valid_fia(q_seq);
  a.query.dtype = a.key.dtype = a.value.dtype = DType::kInt8;
  a.attention_out.dtype = DType::kFloat16;
  a.dequant_scale1 = aq_view(0x5000000, DType::kFloat32, {1});
  a.quant_scale1 = aq_view(0x5000100, DType::kFloat32, {1});
  a.dequant_scale2 = aq_view(0x5000200, DType::kFloat32, {1});
  return a;
}

}  // namespace attnjit::testing
