// single_decode_with_kv_cache: validate -> KernelSpec -> DecodeParams -> launch.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "attnjit/decode.hpp"
#include "attnjit/error.hpp"
#include "ops/common/prewarm.hpp"
#include "ops/common/validate.hpp"
#include "ops/decode/decode_generator.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/decode/decode_spec.hpp"
#include "runtime/backend.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit {

using ops::invalid;

ops::SingleDecodePlan ops::plan_single_decode(const TensorView& q, const TensorView& k,
                                              const TensorView& v, const TensorView& out,
                                              const SingleDecodeOptions& o, const TensorView* lse,
                                              const spec::Arch& arch, int sms) {
  require_layout(o.kv_layout);
  require_backend(o.backend);
  ATTNJIT_REQUIRE(o.pos_encoding_mode == PosEncodingMode::kNone || o.pos_encoding_mode == PosEncodingMode::kRopeLlama ||
                      o.pos_encoding_mode == PosEncodingMode::kAlibi,
                  "pos_encoding_mode", "NONE, ROPE_LLAMA or ALIBI",
                  fmt::format("enum value {}", static_cast<int>(o.pos_encoding_mode)));
  require_rank(q, "q", 2, "[num_qo_heads, head_dim]");
  require_dtype(q, "q", {DType::kFloat16, DType::kBFloat16});
  require_rank(k, "k", 3, o.kv_layout == KvLayout::kNHD ? "[kv_len, num_kv_heads, head_dim]" : "[num_kv_heads, kv_len, head_dim]");
  require_rank(v, "v", 3, o.kv_layout == KvLayout::kNHD ? "[kv_len, num_kv_heads, head_dim]" : "[num_kv_heads, kv_len, head_dim]");
  require_dtype(k, "k", {q.dtype, DType::kFloat8E4M3, DType::kFloat8E5M2});
  ATTNJIT_REQUIRE(v.dtype == k.dtype, "v", fmt::format("k's dtype {}", dtype_name(k.dtype)),
                fmt::format("dtype {}", dtype_name(v.dtype)));
  const int64_t heads = q.shape[0], hd = q.shape[1];
  const bool nhd = o.kv_layout == KvLayout::kNHD;
  const int64_t kv_len = nhd ? k.shape[0] : k.shape[1];
  const int64_t kv_heads = nhd ? k.shape[1] : k.shape[0];
  ATTNJIT_REQUIRE(ops::decode_head_dim_ok(hd), "q", fmt::format("head_dim {}", ops::kDecodeHeadDims),
                  fmt::format("head_dim {}", hd));
  require_dim(k, "k", 2, hd, "head_dim, as q");
  for (int d = 0; d < 3; ++d) require_dim(v, "v", d, k.shape[d], "as k");
  ATTNJIT_REQUIRE(kv_len >= 1 && kv_len <= ops::kMaxDecodeSeqLen, "k", fmt::format("1 <= kv_len <= {}", ops::kMaxDecodeSeqLen),
                  fmt::format("kv_len {}", kv_len));
  ATTNJIT_REQUIRE(kv_heads >= 1 && heads % kv_heads == 0, "q",
                fmt::format("num_qo_heads a multiple of num_kv_heads ({})", kv_heads),
                fmt::format("{} heads", heads));
  ATTNJIT_REQUIRE(heads / kv_heads <= ops::kMaxDecodeGroup, "q",
                  fmt::format("num_qo_heads / num_kv_heads <= {}", ops::kMaxDecodeGroup),
                  fmt::format("{} / {}", heads, kv_heads));
  if (hd > 256) {
    // FlashInfer's limits past head_dim 256 (the warps split the output dims there).
    ATTNJIT_REQUIRE(heads / kv_heads <= ops::kMaxGroupSplitD, "q",
                    fmt::format("num_qo_heads / num_kv_heads <= {} at head_dim {}", ops::kMaxGroupSplitD, hd),
                    fmt::format("{} / {}", heads, kv_heads));
  }
  require_rank(out, "out", 2, "[num_qo_heads, head_dim]");
  require_dtype(out, "out", {q.dtype});
  require_dim(out, "out", 0, heads, "num_qo_heads");
  require_dim(out, "out", 1, hd, "head_dim");
  for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
    require_inner_contiguous(*t, n);
    require_aligned(*t, n, 16);
  }
  if (lse) {
    require_rank(*lse, "lse", 1, "[num_qo_heads]");
    require_dtype(*lse, "lse", {DType::kFloat32});
    require_dim(*lse, "lse", 0, heads, "num_qo_heads");
    require_contiguous(*lse, "lse");
    require_aligned(*lse, "lse", 4);
  }
  for (auto [value, name] : {std::pair{o.q_scale, "q_scale"}, {o.k_scale, "k_scale"}, {o.v_scale, "v_scale"}})
    require_finite_positive(value, name);
  ATTNJIT_REQUIRE(kv_heads * ops::decode_row_blocks(static_cast<int>(heads / kv_heads), 1) <= 65535, "k",
                  "num_kv_heads * ceil(num_qo_heads / num_kv_heads / 16) <= 65535 (the grid's y)",
                  fmt::format("{} KV heads x {}", kv_heads, ops::decode_row_blocks(static_cast<int>(heads / kv_heads), 1)));
  ATTNJIT_REQUIRE(o.window_left >= -1, "window_left", "-1 or >= 0", std::to_string(o.window_left));
  // As FlashInfer: a cap applies only when > 0; zero or negative is off.
  ATTNJIT_REQUIRE(std::isfinite(o.logits_soft_cap), "logits_soft_cap", "a finite value (> 0 caps, <= 0 is off)",
                  fmt::format("{}", o.logits_soft_cap));
  if (o.sm_scale) require_finite_positive(*o.sm_scale, "sm_scale");
  for (auto [value, name] : {std::pair{o.rope_theta, "rope_theta"}, {o.rope_scale, "rope_scale"}}) {
    require_finite_positive(value, name);
    // The kernel gets the reciprocal: below 1/FLT_MAX (~2.9e-39) it is inf.
    ATTNJIT_REQUIRE(std::isfinite(1.0f / value), name, "a value whose reciprocal is finite (>= 2.9e-39)",
                    fmt::format("{}", value));
  }

  SingleDecodePlan plan;
  spec::KernelSpec& s = plan.spec;
  s.family = spec::OpFamily::kDecode;
  s.q_dtype = q.dtype;
  s.kv_dtype = k.dtype;
  s.out_dtype = out.dtype;
  s.set_head_dim(static_cast<int>(hd));
  s.group_size = static_cast<int>(heads / kv_heads);
  s.page_size = 0;
  s.layout = nhd ? spec::KvLayout::kNHD : spec::KvLayout::kHND;
  s.pos_encoding = o.pos_encoding_mode == PosEncodingMode::kRopeLlama ? spec::PosEncoding::kRopeLlama
                   : o.pos_encoding_mode == PosEncodingMode::kAlibi  ? spec::PosEncoding::kAlibi
                                                                      : spec::PosEncoding::kNone;
  if (o.logits_soft_cap > 0.f) s.features |= spec::feature::kSoftCap;
  if (o.window_left >= 0) s.features |= spec::feature::kSlidingWindow;
  if (lse) s.features |= spec::feature::kReturnLse;
  // use_tensor_cores = false asks FlashInfer for its CUDA-core kernel; here both run the
  // tensor-core one, which was 2.1-3.1x faster at every group and length measured.
  s.arch = arch;
  runtime::select_backend(static_cast<runtime::BackendChoice>(o.backend), s);

  DecodeParams& p = plan.params;
  p = DecodeParams{};
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.lse = lse ? static_cast<float*>(lse->data) : nullptr;
  p.q_stride_b = 0;
  p.q_stride_t = 0;
  p.q_stride_h = q.stride[0];
  p.o_stride_b = 0;
  p.o_stride_t = 0;
  p.o_stride_h = out.stride[0];
  p.k_stride_tok = nhd ? k.stride[0] : k.stride[1];
  p.k_stride_head = nhd ? k.stride[1] : k.stride[0];
  p.v_stride_tok = nhd ? v.stride[0] : v.stride[1];
  p.v_stride_head = nhd ? v.stride[1] : v.stride[0];
  p.batch = 1;
  p.num_kv_heads = static_cast<int>(kv_heads);
  p.q_seq_len = 1;
  p.kv_len = static_cast<int>(kv_len);
  p.sm_scale = o.sm_scale ? *o.sm_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  p.q_scale = o.q_scale;
  p.k_scale = o.k_scale;
  p.v_scale = o.v_scale;
  p.rcp_out_scale = 1.0f;
  p.soft_cap = o.logits_soft_cap > 0.f ? o.logits_soft_cap : 0.f;
  p.window_left = o.window_left;
  p.rope_rcp_scale = 1.0f / o.rope_scale;
  p.rope_rcp_theta = 1.0f / o.rope_theta;

  plan.shape.batch = 1;
  plan.shape.num_kv_heads = static_cast<int>(kv_heads);
  plan.shape.group = s.group_size;
  plan.shape.q_seq_len = 1;
  plan.shape.head_dim = static_cast<int>(hd);
  plan.shape.max_seq_len = static_cast<int>(kv_len);
  plan.shape.window_left = o.window_left;
  // One request: 32-token tiles where batch 1 gains from them (ops::decode_batch1_takes_tile32).
  if (s.backend == spec::Backend::kXqa &&
      ops::decode_batch1_takes_tile32(s, plan.shape, sms > 0 ? sms : ops::kNominalSms))
    s.features |= spec::feature::kTile32;
  return plan;
}

void single_decode_with_kv_cache(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& out, const SingleDecodeOptions& options,
                                 Stream stream, const TensorView* lse, Runtime* runtime) {
  const int device = driver::current_device();
  const driver::DeviceCaps& info = driver::device_caps(device);
  ops::SingleDecodePlan plan =
      ops::plan_single_decode(q, k, v, out, options, lse, spec::arch_for_device(info.sm_major, info.sm_minor),
                              info.sm_count);
  ops::DecodeLaunch l;
  l.spec = &plan.spec;
  l.device = device;
  l.shape = plan.shape;
  l.use_runtime_scratch = true;
  l.pdl = options.enable_pdl && info.sm_major >= 9;
  ops::launch_decode(runtime ? *runtime : Runtime::global(), l, plan.params, stream);
}

std::string prewarm_single_decode_with_kv_cache(const TensorView& q, const TensorView& k,
                                                const TensorView& v, const TensorView& out,
                                                const SingleDecodeOptions& options, const TensorView* lse,
                                                const std::string& arch, Runtime* runtime) {
  // No arch: this device's SMs decide the kernel, as the call's will (else kNominalSms).
  const ops::PrewarmTarget target = ops::prewarm_target(arch);
  const spec::KernelSpec s = ops::single_decode_prewarm_spec(q, k, v, out, options, lse, target.arch, target.sms);
  return ops::prewarm_spec(runtime ? *runtime : Runtime::global(), s, arch);
}

spec::KernelSpec ops::single_decode_prewarm_spec(const TensorView& q, const TensorView& k, const TensorView& v,
                                                 const TensorView& out, const SingleDecodeOptions& options,
                                                 const TensorView* lse, const spec::Arch& arch, int sms) {
  ShapesOnlyScope shapes_only;
  return plan_single_decode(q, k, v, out, options, lse, arch, sms).spec;
}

}  // namespace attnjit
