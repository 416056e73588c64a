// FIA's decode rows on the decode family's kernel: eligibility, spec and
// DecodeParams from plan_fia's result, the device tables, then launch_decode.
#include "ops/fia/fia_decode.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "attnjit/error.hpp"
#include "ops/common/stream_lengths.hpp"
#include "ops/common/validate.hpp"
#include "ops/decode/decode_generator.hpp"
#include "runtime/backend.hpp"
#include "util/env_knob.hpp"

namespace attnjit::ops {

namespace {

constexpr int kMaxGridZ = 65535;  // the decode grid's z is the batch

// int4 K/V rows are D / 2 bytes: 64 at D 128, half an L2 line (at D 256 a whole one). Where a
// token's KV heads sit side by side (BSH, BSND), one CTA takes two heads (spec feature kvpair),
// so each copy reads both halves of the line at once. With heads apart (BNSD) every row's line
// is its own, but per-token scales still gain: a tile's scale work serves both heads' columns
// (H200, B128·KV4K / B16·KV32K per token 3.54-3.61 / 3.58 -> 3.65-3.68 / 3.68 TB/s), where
// per channel loses (3.81-3.85 -> 3.73). Per-token scales that differ by head (mode 3: the
// stage holds both heads' blocks, spec feature tokhead) share no work between the heads,
// so they pair only where the heads are adjacent. ATTNJIT_DECODE_KV_PAIR (measuring): 0
// never pairs, 2 pairs wherever the kernel can. Returns the features to add.
uint32_t kv_pair_features(const FiaPlan& plan, bool k_tok, bool v_tok) {
  const PrefillParams& pp = plan.params;
  const int64_t row_words = plan.spec.head_dim_qk / 8;  // int32 words a head's row
  if (plan.spec.kv_dtype != DType::kInt32 || pp.group > 4 || plan.num_kv_heads < 2 || plan.spec.head_dim_qk > 128)
    return 0;
  const bool by_head = (k_tok && pp.k_dq.sh != 0) || (v_tok && pp.v_dq.sh != 0);
  const int knob = util::env_knob("ATTNJIT_DECODE_KV_PAIR", 0, 2, "0, 1 or 2").value_or(1);
  const bool adjacent = pp.k_stride_h == row_words && pp.v_stride_h == row_words;
  const bool pair = knob == 2 || (knob == 1 && (adjacent || ((k_tok || v_tok) && !by_head)));
  if (!pair) return 0;
  return spec::feature::kKvPair | (by_head ? spec::feature::kTokHead : 0u);
}

}  // namespace

std::optional<FiaDecodePlan> plan_fia_decode(const FiaPlan& plan, const FiaArgs& a, const spec::Arch& arch) {
  if (!plan.decode || plan.layout == FiaLayout::kTND) return std::nullopt;
  if (present(a.atten_mask) || present(a.pse_shift) || a.softmax_lse_flag) return std::nullopt;
  // Left padding, the shared prefix and int8 output: the prefill kernel serves them at Q_S = 1 too.
  if (plan.spec.has(spec::feature::kLeftPad | spec::feature::kSharedPrefix) || plan.spec.out_dtype != plan.spec.q_dtype)
    return std::nullopt;
  // Quantised K/V: int8 and int4 take this kernel, their scales outside the MMA
  // (decode_params.cuh): scales that vary by KV head and channel only (per channel, tensor
  // or head), or fp32 per-token ones (every per-token mode: by token, token and head,
  // page-managed).
  auto by_channel = [](const PrefillDequant& q) { return q.sb == 0 && q.ss == 0 && !q.paged; };
  auto by_token = [](const PrefillDequant& q) { return q.dtype == prefill_dq::kFloat32 && q.sd == 0; };
  const bool quant_kv = plan.spec.kv_dtype == DType::kInt8 || plan.spec.kv_dtype == DType::kInt32;  // int8 or int4
  const PrefillDequant& kq = plan.params.k_dq;
  const PrefillDequant& vq = plan.params.v_dq;
  const bool k_tok = quant_kv && by_token(kq), v_tok = quant_kv && by_token(vq);
  if (plan.spec.kv_dtype != plan.spec.q_dtype &&
      !(quant_kv && (by_channel(kq) || k_tok) && (by_channel(vq) || v_tok) && (!k_tok || v_tok)))
    return std::nullopt;
  const int D = plan.spec.head_dim_qk;
  const int B = plan.batch, KN = plan.num_kv_heads;
  const PrefillParams& pp = plan.params;
  const int G = pp.group;
  if (D != plan.spec.head_dim_vo || !decode_head_dim_ok(D) || (D > 256 && G > kMaxGroupSplitD)) return std::nullopt;
  if (B < 1 || B > kMaxGridZ || plan.kv_seq < 1) return std::nullopt;

  FiaDecodePlan d;
  int page = 0, pps = 0;
  if (pp.block_size > 0) {
    // The kernel indexes the table as page_table[b * pages_per_seq + j].
    const TensorView& bt = a.block_table;
    if (B > 1 && bt.stride[0] != bt.shape[1]) return std::nullopt;
    d.kv = FiaDecodeKv::kPaged;
    page = pp.block_size;
    pps = int(bt.shape[1]);
  } else {
    d.kv = FiaDecodeKv::kContiguous;  // any batch and KV_S: the batch stride rides in k_stride_page
  }

  spec::KernelSpec& s = d.spec;
  s.family = spec::OpFamily::kDecode;
  s.q_dtype = s.kv_dtype = s.out_dtype = plan.spec.q_dtype;
  if (quant_kv) s.kv_dtype = plan.spec.kv_dtype;
  s.set_head_dim(D);
  s.group_size = G;
  s.page_size = page;
  s.layout = spec::KvLayout::kNHD;  // strides carry the layout; the kernel reads no other
  s.mask = spec::MaskMode::kNone;
  s.pos_encoding = spec::PosEncoding::kNone;
  s.features = (k_tok ? spec::feature::kKTokenScale : 0u) | (v_tok ? spec::feature::kVTokenScale : 0u);
  s.features |= kv_pair_features(plan, k_tok, v_tok);
  s.arch = arch;
  // auto and xqa both resolve to the decode family's one verified backend.
  s.backend = spec::Backend::kXqa;
  if (!runtime::backend_supports(spec::Backend::kXqa, s, nullptr)) return std::nullopt;

  // Lengths: one value for all (seq_lens null), or a table the launch uploads.
  int max_len = 0;
  bool uniform = true;
  int first = -1;
  for (int b = 0; b < B; ++b) {
    const int L = fia_lengths(plan, a, b).kv_len;
    if (first < 0) first = L;
    uniform = uniform && L == first;
    max_len = std::max(max_len, L);
  }
  if (!uniform) {
    d.ragged_lens.resize(size_t(B));
    for (int b = 0; b < B; ++b) d.ragged_lens[size_t(b)] = unsigned(fia_lengths(plan, a, b).kv_len);
  }

  DecodeParams& p = d.params;
  p = DecodeParams{};
  p.q = pp.q;
  p.k = pp.k;
  p.v = pp.v;
  p.out = pp.out;
  p.lse = nullptr;
  p.page_table = d.kv == FiaDecodeKv::kPaged ? pp.block_table : nullptr;
  p.seq_lens = nullptr;                                                    // ragged: set at launch
  p.q_stride_b = pp.q_stride_b;
  p.q_stride_t = 0;
  p.q_stride_h = pp.q_stride_h;
  p.o_stride_b = pp.o_stride_b;
  p.o_stride_t = 0;
  p.o_stride_h = pp.o_stride_h;
  p.k_stride_tok = pp.k_stride_s;
  p.k_stride_head = pp.k_stride_h;
  p.v_stride_tok = pp.v_stride_s;
  p.v_stride_head = pp.v_stride_h;
  p.k_stride_page = pp.k_stride_b;  // paged: the block stride; contiguous: the batch stride
  p.v_stride_page = pp.v_stride_b;
  p.batch = B;
  p.num_kv_heads = KN;
  p.q_seq_len = 1;
  p.kv_len = uniform ? first : 0;
  p.pages_per_seq = pps;
  p.sm_scale = pp.scale;  // FIA: scale * q.k (no q/k/v scales on this path)
  p.q_scale = p.k_scale = p.v_scale = p.rcp_out_scale = 1.0f;
  if (quant_kv) {
    if (!k_tok) {
      p.k_chan = kq.scale;  // K's offset: dropped by softmax (no LSE on this path)
      p.kc_sh = kq.sh, p.kc_sd = kq.sd, p.k_chan_dtype = kq.dtype;
    }
    if (!v_tok) {
      p.v_chan = vq.scale;
      p.v_chan_off = vq.offset;
      p.vc_sh = vq.sh, p.vc_sd = vq.sd, p.v_chan_dtype = vq.dtype;
    }
    for (int i = 0; i < 2; ++i) {
      const PrefillDequant& q = i ? vq : kq;
      if (!(i ? v_tok : k_tok)) continue;
      p.tok_scale[i] = static_cast<const float*>(q.scale);
      p.tok_off[i] = static_cast<const float*>(q.offset);
      p.tok_sb[i] = q.sb, p.tok_sh[i] = q.sh, p.tok_ss[i] = q.ss, p.tok_paged[i] = q.paged;
    }
  }
  p.soft_cap = 0.f;
  p.window_left = -1;
  p.rope_rcp_scale = p.rope_rcp_theta = 1.0f;

  d.shape.batch = B;
  d.shape.num_kv_heads = KN;
  d.shape.group = G;
  d.shape.q_seq_len = 1;
  d.shape.head_dim = D;
  d.shape.max_seq_len = std::max(max_len, 1);  // all-empty batches still plan one split
  d.shape.window_left = -1;
  d.shape.rows_per_cta = decode_rows_per_cta(s, 1);
  return d;
}

void launch_fia_decode(Runtime& rt, FiaDecodePlan& d, int device, CUstream stream) {
  DecodeParams& p = d.params;
  if (!d.ragged_lens.empty())
    p.seq_lens = upload_stream_lengths("fused_infer_attention_score (decode)", device, stream, d.ragged_lens.data(),
                                       d.ragged_lens.size());
  DecodeLaunch l;
  l.spec = &d.spec;
  l.device = device;
  l.shape = d.shape;
  l.use_runtime_scratch = true;  // the split-KV partials and semaphores, as single_decode
  l.pdl = driver::device_caps(device).sm_major >= 9;  // as xqa's default: the kernel waits before its first read
  launch_decode(rt, l, p, reinterpret_cast<Stream>(stream));
}

}  // namespace attnjit::ops
