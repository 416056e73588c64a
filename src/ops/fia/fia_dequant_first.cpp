// int8 K/V at Q_S > 1, dequantised first (see fia_dequant_first.hpp).
#include "ops/fia/fia_dequant_first.hpp"

#include <algorithm>

#include "util/env_knob.hpp"

namespace attnjit::ops {

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void fia_plan_dequant_first(const FiaArgs& a, const FiaDims& d, FiaPlan& plan) {
  spec::KernelSpec& s = plan.spec;
  // The seed's int8 K/V at Q_S > 1: contiguous and never TND; the pass has no shared prefix.
  if (s.kv_dtype != DType::kInt8 || d.decode || d.paged || d.layout == FiaLayout::kTND ||
      s.has(spec::feature::kSharedPrefix))
    return;
  // An int8 query has no other path (fia_check_int8_query refused the rest).
  const bool int8_query = s.q_dtype == DType::kInt8;
  const std::optional<int> knob = util::env_knob("ATTNJIT_FIA_DEQUANT_FIRST", 0, 1, "0 or 1");
  if (knob && *knob == 0 && !int8_query) return;
  if (!knob && !int8_query) {
    int64_t longest = 0;
    for (int b = 0; b < d.B; ++b) longest = std::max<int64_t>(longest, fia_lengths(plan, a, b).q_len);
    if (longest * (d.N / d.KN) < kDequantFirstRows) return;
  }
  const size_t rows = size_t(d.B) * size_t(d.KS) * size_t(d.KN);
  FiaDequantFirst f;
  f.k_bytes = round_up(rows * size_t(d.D) * 2, 256);
  f.v_bytes = round_up(rows * size_t(d.DV) * 2, 256);
  if (int8_query) f.q_bytes = round_up(size_t(d.B) * size_t(d.QS) * size_t(d.N) * size_t(d.D) * 2, 256);
  if (f.k_bytes + f.v_bytes + f.q_bytes > kDequantFirstMaxBytes && !int8_query) return;
  // Dense (B, S, heads, D) copies: the tensors' token positions, so left padding's
  // windows (q_tok0, kv_tok0) address them as they address the source.
  PrefillDequantOut& o = f.out;
  o.k_sh = d.D, o.k_ss = d.KN * d.D, o.k_sb = d.KS * d.KN * d.D;
  o.v_sh = d.DV, o.v_ss = d.KN * d.DV, o.v_sb = d.KS * d.KN * d.DV;
  // The 16-bit copies: the query's dtype, or fp16 for an int8 query (the seed's output).
  const DType copies = int8_query ? DType::kFloat16 : s.q_dtype;
  if (int8_query) {
    o.q_sh = d.D, o.q_ss = d.N * d.D, o.q_sb = d.QS * d.N * d.D;
    o.dequant_scale1 = static_cast<const float*>(a.dequant_scale1.data);
    o.quant_scale1 = static_cast<const float*>(a.quant_scale1.data);
    o.dequant_scale2 = static_cast<const float*>(a.dequant_scale2.data);
  }
  f.pass = s;
  f.pass.backend = spec::Backend::kXqa;
  f.pass.mask = spec::MaskMode::kNone;
  f.pass.out_dtype = copies;
  f.pass.features = spec::feature::kDequantPass | (s.features & spec::feature::kLeftPad);
  s.q_dtype = s.kv_dtype = copies;
  plan.dequant_first = f;
}

void fia_dequant_params(const FiaPlan& plan, void* copies, PrefillParams& pass, PrefillParams& attention) {
  const FiaDequantFirst& f = *plan.dequant_first;
  pass = plan.params;
  pass.dq_out = f.out;
  pass.dq_out.k = copies;
  pass.dq_out.v = static_cast<char*>(copies) + f.k_bytes;
  if (f.q_bytes) pass.dq_out.q = static_cast<char*>(copies) + f.k_bytes + f.v_bytes;
  attention = plan.params;
  if (f.q_bytes) {
    attention.q = pass.dq_out.q;
    attention.q_stride_b = f.out.q_sb, attention.q_stride_s = f.out.q_ss, attention.q_stride_h = f.out.q_sh;
  }
  attention.k = pass.dq_out.k;
  attention.v = pass.dq_out.v;
  attention.k_stride_b = f.out.k_sb, attention.k_stride_s = f.out.k_ss, attention.k_stride_h = f.out.k_sh;
  attention.v_stride_b = f.out.v_sb, attention.v_stride_s = f.out.v_ss, attention.v_stride_h = f.out.v_sh;
  attention.k_dq = attention.v_dq = PrefillDequant{};
}

Grid fia_dequant_grid(const FiaPlan& plan, const PrefillParams& p) {
  int longest = 0;  // tokens: the KV's, and the query's where the pass copies it
  const bool query = plan.dequant_first->q_bytes != 0;
  for (int i = 0; i < p.num_batches; ++i)
    longest = std::max({longest, p.batches[i].kv_len, query ? p.batches[i].q_len : 0});
  Grid g;
  g.x = static_cast<unsigned>(std::max(1, (longest + 63) / 64));
  g.y = static_cast<unsigned>(plan.num_kv_heads);
  g.z = static_cast<unsigned>(p.num_batches);
  return g;
}

}  // namespace attnjit::ops
