// xqa: validate -> KernelSpec -> DecodeParams -> launch (FlashInfer xqa semantics).
#include "attnjit/xqa.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "attnjit/error.hpp"
#include "ops/common/prewarm.hpp"
#include "ops/common/validate.hpp"
#include "ops/decode/decode_generator.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/decode/decode_spec.hpp"
#include "runtime/backend.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit {

namespace {
constexpr int kMaxGroup = 64;
constexpr int kMaxQSeqLen = 65536;  // draft tokens per request (and the mask's row count)
}

ops::XqaPlan ops::plan_xqa(const XqaArgs& a, const spec::Arch& arch, int sms) {
  const bool ragged = present(a.q_cu_seq_lens);
  const bool spec_dec = a.q_seq_len > 1 || ragged;
  ATTNJIT_REQUIRE(a.q_seq_len >= 1 && a.q_seq_len <= kMaxQSeqLen, "q_seq_len", fmt::format("1 to {}", kMaxQSeqLen),
                  std::to_string(a.q_seq_len));
  require_layout(a.kv_layout);
  require_backend(a.backend);
  // q: [batch, beam, (q_seq_len,) heads, head_dim] or ragged [tokens, heads, head_dim].
  require_defined(a.q, "q");
  require_dtype(a.q, "q", {DType::kFloat16, DType::kBFloat16});
  int hd_dim, head_dim_idx, batch;
  if (ragged) {
    require_rank(a.q, "q", 3, "[total_q_tokens, num_q_heads, head_dim] (ragged q_cu_seq_lens)");
    require_rank(a.q_cu_seq_lens, "q_cu_seq_lens", 1, "[batch + 1]");
    require_dtype(a.q_cu_seq_lens, "q_cu_seq_lens", {DType::kUInt32, DType::kInt32});
    require_contiguous(a.q_cu_seq_lens, "q_cu_seq_lens");  // the kernel reads entries b and b + 1
    require_aligned(a.q_cu_seq_lens, "q_cu_seq_lens", 4);
    batch = static_cast<int>(a.q_cu_seq_lens.shape[0] - 1);
    ATTNJIT_REQUIRE(batch >= 1, "q_cu_seq_lens", "at least 2 entries", a.q_cu_seq_lens.shape_string());
    hd_dim = 2;
    head_dim_idx = 1;
  } else if (a.q_seq_len > 1) {
    require_rank(a.q, "q", 5, "[batch, beam_width, q_seq_len, num_q_heads, head_dim]");
    require_dim(a.q, "q", 2, a.q_seq_len, "q_seq_len");
    batch = static_cast<int>(a.q.shape[0]);
    hd_dim = 4;
    head_dim_idx = 3;
  } else {
    require_rank(a.q, "q", 4, "[batch, beam_width, num_q_heads, head_dim]");
    batch = static_cast<int>(a.q.shape[0]);
    hd_dim = 3;
    head_dim_idx = 2;
  }
  if (!ragged)
    ATTNJIT_REQUIRE(a.q.shape[1] == 1, "q", "beam_width 1 (the only beam width supported)",
                  fmt::format("beam_width {} in {}", a.q.shape[1], a.q.shape_string()));
  const int64_t hd = a.q.shape[hd_dim];
  const int64_t num_q_heads = a.q.shape[head_dim_idx];
  ATTNJIT_REQUIRE(ops::decode_head_dim_ok(hd), "q", fmt::format("head_dim {}", ops::kDecodeHeadDims),
                  fmt::format("head_dim {}", hd));
  ATTNJIT_REQUIRE(a.num_kv_heads >= 1, "num_kv_heads", ">= 1", std::to_string(a.num_kv_heads));
  ATTNJIT_REQUIRE(num_q_heads % a.num_kv_heads == 0, "num_kv_heads",
                fmt::format("a divisor of num_q_heads ({})", num_q_heads), std::to_string(a.num_kv_heads));
  const int group = static_cast<int>(num_q_heads / a.num_kv_heads);
  ATTNJIT_REQUIRE(group <= kMaxGroup, "num_kv_heads", fmt::format("a head_group_ratio <= {}", kMaxGroup),
                fmt::format("ratio {}", group));
  if (hd > 256) {
    // FlashInfer's limits past head_dim 256 (the warps split the output dims there).
    ATTNJIT_REQUIRE(group <= ops::kMaxGroupSplitD, "num_kv_heads",
                    fmt::format("a head_group_ratio <= {} at head_dim {}", ops::kMaxGroupSplitD, hd),
                    fmt::format("ratio {}", group));
    ATTNJIT_REQUIRE(!ragged, "q_cu_seq_lens",
                    fmt::format("absent at head_dim {} (no speculative decoding past head_dim 256)", hd), "present");
    ATTNJIT_REQUIRE(a.q_seq_len == 1, "q_seq_len",
                    fmt::format("1 at head_dim {} (no speculative decoding past head_dim 256)", hd),
                    std::to_string(a.q_seq_len));
  }
  ATTNJIT_REQUIRE(a.page_size == 16 || a.page_size == 32 || a.page_size == 64 || a.page_size == 128,
                "page_size", "16, 32, 64 or 128", std::to_string(a.page_size));

  const bool nhd = a.kv_layout == KvLayout::kNHD;
  const char* kv_shape = nhd ? "[num_pages, page_size, num_kv_heads, head_dim]"
                             : "[num_pages, num_kv_heads, page_size, head_dim]";
  require_rank(a.k_cache, "k_cache", 4, kv_shape);
  require_rank(a.v_cache, "v_cache", 4, kv_shape);
  require_dtype(a.k_cache, "k_cache", {a.q.dtype, DType::kFloat8E4M3});
  ATTNJIT_REQUIRE(a.v_cache.dtype == a.k_cache.dtype, "v_cache",
                fmt::format("k_cache's dtype {}", dtype_name(a.k_cache.dtype)),
                fmt::format("dtype {}", dtype_name(a.v_cache.dtype)));
  require_dim(a.k_cache, "k_cache", nhd ? 1 : 2, a.page_size, "page_size");
  require_dim(a.k_cache, "k_cache", nhd ? 2 : 1, a.num_kv_heads, "num_kv_heads");
  require_dim(a.k_cache, "k_cache", 3, hd, "head_dim, as q");
  for (int d = 0; d < 4; ++d) require_dim(a.v_cache, "v_cache", d, a.k_cache.shape[d], "as k_cache");

  require_rank(a.page_table, "page_table", 2, "[batch, pages_per_seq]");
  // Checked before anything narrows it to int (max_seq_len is an int in the kernel).
  ATTNJIT_REQUIRE(a.page_table.shape[1] <= ops::kMaxDecodeSeqLen / a.page_size, "page_table",
                  fmt::format("pages_per_seq * page_size <= {}", ops::kMaxDecodeSeqLen),
                  fmt::format("pages_per_seq {}", a.page_table.shape[1]));
  require_dtype(a.page_table, "page_table", {DType::kInt32});
  require_dim(a.page_table, "page_table", 0, batch, "batch");
  require_contiguous(a.page_table, "page_table");
  require_aligned(a.page_table, "page_table", 4);
  require_defined(a.seq_lens, "seq_lens");
  require_dtype(a.seq_lens, "seq_lens", {DType::kUInt32, DType::kInt32});
  ATTNJIT_REQUIRE((a.seq_lens.rank == 2 && a.seq_lens.shape[1] == 1) || a.seq_lens.rank == 1, "seq_lens",
                "[batch, beam_width=1]", a.seq_lens.shape_string());
  require_dim(a.seq_lens, "seq_lens", 0, batch, "batch");
  require_contiguous(a.seq_lens, "seq_lens");
  require_aligned(a.seq_lens, "seq_lens", 4);

  require_defined(a.output, "output");
  ATTNJIT_REQUIRE(a.output.rank == a.q.rank, "output", "q's shape " + a.q.shape_string(), a.output.shape_string());
  for (int d = 0; d < a.q.rank; ++d)
    require_dim(a.output, "output", d, a.q.shape[d], "as q");
  const bool fp8_kv = a.k_cache.dtype == DType::kFloat8E4M3;
  if (fp8_kv) require_dtype(a.output, "output", {a.q.dtype, DType::kFloat8E4M3});
  else require_dtype(a.output, "output", {a.q.dtype});
  for (auto [t, n] : {std::pair{&a.q, "q"}, {&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"},
                      {&a.output, "output"}}) {
    require_inner_contiguous(*t, n);
    require_aligned(*t, n, t == &a.output && fp8_kv ? 8 : 16);
  }
  if (present(a.sinks)) {
    require_defined(a.sinks, "sinks");
    require_dtype(a.sinks, "sinks", {DType::kFloat32});
    ATTNJIT_REQUIRE(a.sinks.numel() == num_q_heads, "sinks",
                  fmt::format("[num_kv_heads, head_group_ratio] = [{}, {}]", a.num_kv_heads, group),
                  a.sinks.shape_string());
    require_contiguous(a.sinks, "sinks");
    require_aligned(a.sinks, "sinks", 4);
  }
  ATTNJIT_REQUIRE(a.sliding_win_size >= 0, "sliding_win_size", ">= 0 (0 is off)", std::to_string(a.sliding_win_size));
  // As in FlashInfer's XQA: kv_scale dequantizes an fp8 cache and is ignored for
  // 16-bit KV; rcp_out_scale only scales an fp8 output.
  const bool fp8_out = a.output.dtype == DType::kFloat8E4M3;
  if (fp8_out) require_finite_positive(a.rcp_out_scale, "rcp_out_scale");
  if (!a.q_scale.device_ptr) require_finite_positive(a.q_scale.value, "q_scale");
  if (fp8_kv && !a.kv_scale.device_ptr) require_finite_positive(a.kv_scale.value, "kv_scale");
  const float* kv_scale_ptr = fp8_kv ? a.kv_scale.device_ptr : nullptr;
  const int words = (a.q_seq_len + 31) / 32;
  if (spec_dec && ragged) {
    // XQA packs ragged masks by query token: row q_cu_seq_lens[b] + t.
    require_rank(a.mask, "mask", 2, "[total_q_tokens, ((q_seq_len + 31) / 32) * 2] uint16 (ragged q_cu_seq_lens)");
    require_dtype(a.mask, "mask", {DType::kUInt16});
    require_dim(a.mask, "mask", 0, a.q.shape[0], "total_q_tokens, as q");
    require_dim(a.mask, "mask", 1, int64_t(words) * 2, "((q_seq_len + 31) / 32) * 2");
    require_contiguous(a.mask, "mask");
    require_aligned(a.mask, "mask", 4);
  } else if (spec_dec) {
    require_rank(a.mask, "mask", 3, "[batch, q_seq_len, ((q_seq_len + 31) / 32) * 2] uint16");
    require_dtype(a.mask, "mask", {DType::kUInt16});
    require_dim(a.mask, "mask", 0, batch, "batch");
    require_dim(a.mask, "mask", 1, a.q_seq_len, "q_seq_len");
    require_dim(a.mask, "mask", 2, int64_t(words) * 2, "((q_seq_len + 31) / 32) * 2");
    require_contiguous(a.mask, "mask");
    require_aligned(a.mask, "mask", 4);
  }  // without speculative decoding a mask is ignored, as FlashInfer does
  if (a.sm_count) ATTNJIT_REQUIRE(*a.sm_count >= 1, "sm_count", ">= 1", std::to_string(*a.sm_count));

  XqaPlan plan;
  spec::KernelSpec& s = plan.spec;
  s.family = spec::OpFamily::kXqa;
  s.q_dtype = a.q.dtype;
  s.kv_dtype = a.k_cache.dtype;
  s.out_dtype = a.output.dtype;
  s.set_head_dim(static_cast<int>(hd));
  s.group_size = group;
  s.page_size = a.page_size;
  s.layout = nhd ? spec::KvLayout::kNHD : spec::KvLayout::kHND;
  s.mask = spec_dec ? spec::MaskMode::kCustom : spec::MaskMode::kNone;
  if (present(a.sinks)) s.features |= spec::feature::kSinks;
  if (a.sliding_win_size > 0) s.features |= spec::feature::kSlidingWindow;
  if (a.q_scale.device_ptr || kv_scale_ptr) s.features |= spec::feature::kScalePointers;
  if (ragged) s.features |= spec::feature::kRaggedQ;
  s.arch = arch;
  runtime::select_backend(static_cast<runtime::BackendChoice>(a.backend), s);

  DecodeParams& p = plan.params;
  p = DecodeParams{};
  p.q = a.q.data;
  p.k = a.k_cache.data;
  p.v = a.v_cache.data;
  p.out = a.output.data;
  p.page_table = static_cast<const int*>(a.page_table.data);
  p.seq_lens = static_cast<const unsigned*>(a.seq_lens.data);
  p.q_cu_seq_lens = ragged ? static_cast<const unsigned*>(a.q_cu_seq_lens.data) : nullptr;
  p.mask = spec_dec ? static_cast<const unsigned*>(a.mask.data) : nullptr;
  p.sinks = present(a.sinks) ? static_cast<const float*>(a.sinks.data) : nullptr;
  p.q_scale_ptr = a.q_scale.device_ptr;
  p.kv_scale_ptr = kv_scale_ptr;
  const TensorView& q = a.q;
  const TensorView& o = a.output;
  if (ragged) {
    p.q_stride_b = p.o_stride_b = 0;
    p.q_stride_t = q.stride[0];
    p.o_stride_t = o.stride[0];
  } else {
    p.q_stride_b = q.stride[0];
    p.o_stride_b = o.stride[0];
    p.q_stride_t = a.q_seq_len > 1 ? q.stride[2] : 0;
    p.o_stride_t = a.q_seq_len > 1 ? o.stride[2] : 0;
  }
  p.q_stride_h = q.stride[head_dim_idx];
  p.o_stride_h = o.stride[head_dim_idx];
  const TensorView& kc = a.k_cache;
  const TensorView& vc = a.v_cache;
  p.k_stride_page = kc.stride[0];
  p.v_stride_page = vc.stride[0];
  p.k_stride_tok = nhd ? kc.stride[1] : kc.stride[2];
  p.v_stride_tok = nhd ? vc.stride[1] : vc.stride[2];
  p.k_stride_head = nhd ? kc.stride[2] : kc.stride[1];
  p.v_stride_head = nhd ? vc.stride[2] : vc.stride[1];
  p.mask_stride_b = spec_dec && !ragged ? int64_t(a.q_seq_len) * words : 0;  // in 32-bit words
  p.mask_stride_t = spec_dec ? words : 0;
  p.batch = batch;
  p.num_kv_heads = a.num_kv_heads;
  p.q_seq_len = a.q_seq_len;
  p.pages_per_seq = static_cast<int>(a.page_table.shape[1]);
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  p.q_scale = a.q_scale.value;
  p.k_scale = p.v_scale = fp8_kv ? a.kv_scale.value : 1.0f;
  p.rcp_out_scale = fp8_out ? a.rcp_out_scale : 1.0f;
  p.soft_cap = 0.f;
  p.window_left = a.sliding_win_size > 0 ? a.sliding_win_size - 1 : -1;
  p.rope_rcp_scale = p.rope_rcp_theta = 1.0f;

  plan.shape.batch = batch;
  plan.shape.num_kv_heads = a.num_kv_heads;
  plan.shape.group = group;
  plan.shape.q_seq_len = a.q_seq_len;
  plan.shape.head_dim = static_cast<int>(hd);
  plan.shape.max_seq_len = p.pages_per_seq * a.page_size;
  plan.shape.window_left = p.window_left;
  // 32 rows per CTA (dual-M) or 64 (split-M) where the kernel has them and a request has more than 16.
  plan.shape.rows_per_cta = ops::decode_rows_per_cta(s, a.q_seq_len);
  // One request cannot be ragged, so batch 1 takes 32-token tiles where they gain
  // (ops::decode_batch1_takes_tile32 says where and why).
  if (batch == 1 && s.backend == spec::Backend::kXqa &&
      ops::decode_batch1_takes_tile32(s, plan.shape, a.sm_count.value_or(sms > 0 ? sms : ops::kNominalSms)))
    s.features |= spec::feature::kTile32;
  // CUDA grid limits: batch is gridDim.z, heads x row blocks gridDim.y (65535 each).
  ATTNJIT_REQUIRE(batch <= 65535, "q", "batch <= 65535", std::to_string(batch));
  ATTNJIT_REQUIRE(int64_t(a.num_kv_heads) * ops::decode_row_blocks(group, a.q_seq_len) <= 65535, "q",
                  "num_kv_heads * ceil(q_seq_len * head_group_ratio / 16) <= 65535",
                  std::to_string(int64_t(a.num_kv_heads) * ops::decode_row_blocks(group, a.q_seq_len)));
  if (present(a.semaphores)) {
    require_defined(a.semaphores, "semaphores");
    require_dtype(a.semaphores, "semaphores", {DType::kUInt32, DType::kInt32});
    require_contiguous(a.semaphores, "semaphores");
    require_aligned(a.semaphores, "semaphores", 4);
    plan.semaphore_count = static_cast<size_t>(a.semaphores.numel());
  }
  if (present(a.workspace_buffer))
    plan.workspace_bytes = require_scratch_bytes(a.workspace_buffer, "workspace_buffer", 16);
  return plan;
}

namespace {
// The sizing helpers take the same limits as a call (plan_xqa), so a size is never
// computed for a shape no call could have.
void check_sizing_args(int batch, int num_kv_heads, int head_group_ratio, int q_seq_len) {
  ATTNJIT_REQUIRE(batch >= 1 && batch <= 65535, "batch", "1 to 65535", std::to_string(batch));
  ATTNJIT_REQUIRE(num_kv_heads >= 1, "num_kv_heads", ">= 1", std::to_string(num_kv_heads));
  ATTNJIT_REQUIRE(head_group_ratio >= 1 && head_group_ratio <= kMaxGroup, "head_group_ratio",
                  fmt::format("1 to {}", kMaxGroup), std::to_string(head_group_ratio));
  ATTNJIT_REQUIRE(q_seq_len >= 1 && q_seq_len <= kMaxQSeqLen, "q_seq_len", fmt::format("1 to {}", kMaxQSeqLen),
                  std::to_string(q_seq_len));
  ATTNJIT_REQUIRE(int64_t(num_kv_heads) * ops::decode_row_blocks(head_group_ratio, q_seq_len) <= 65535,
                  "num_kv_heads", "num_kv_heads * ceil(q_seq_len * head_group_ratio / 16) <= 65535",
                  std::to_string(num_kv_heads));
}
}  // namespace

size_t xqa_workspace_bytes(int batch, int num_kv_heads, int head_group_ratio, int q_seq_len,
                           int head_dim, int max_seq_len, int sm_count) {
  check_sizing_args(batch, num_kv_heads, head_group_ratio, q_seq_len);
  ATTNJIT_REQUIRE(ops::decode_head_dim_ok(head_dim), "head_dim", ops::kDecodeHeadDims, std::to_string(head_dim));
  ATTNJIT_REQUIRE(max_seq_len >= 1 && max_seq_len <= ops::kMaxDecodeSeqLen, "max_seq_len",
                  fmt::format("1 to {} (pages_per_seq * page_size)", ops::kMaxDecodeSeqLen), std::to_string(max_seq_len));
  ATTNJIT_REQUIRE(sm_count >= 1, "sm_count", ">= 1 (the GPU's multiprocessor count)", std::to_string(sm_count));
  // A smaller batch or a shorter draft (ragged q_seq_len varies per call) may
  // split more: the bound covers every base grid up to this one.
  const ops::DecodeShape largest{batch, num_kv_heads, head_group_ratio, q_seq_len, head_dim, max_seq_len};
  return ops::decode_workspace_bound(largest, sm_count);
}

size_t xqa_semaphore_count(int batch, int num_kv_heads, int head_group_ratio, int q_seq_len) {
  check_sizing_args(batch, num_kv_heads, head_group_ratio, q_seq_len);
  ops::DecodeShape s{batch, num_kv_heads, head_group_ratio, q_seq_len, 128, 1};
  return ops::decode_semaphore_count(s);
}

std::string prewarm_xqa(const XqaArgs& args, const std::string& arch, Runtime* runtime) {
  // Without an arch, the current GPU's: its SMs too, so that the kernel is the one a launch takes.
  const ops::PrewarmTarget target = ops::prewarm_target(arch);
  const spec::KernelSpec s = ops::xqa_prewarm_spec(args, target.arch, target.sms);
  return ops::prewarm_spec(runtime ? *runtime : Runtime::global(), s, arch);
}

spec::KernelSpec ops::xqa_prewarm_spec(const XqaArgs& args, const spec::Arch& arch, int sms) {
  ShapesOnlyScope shapes_only;
  return plan_xqa(args, arch, sms).spec;
}

void xqa(const XqaArgs& args, Stream stream, Runtime* runtime) {
  const int device = driver::current_device();
  const driver::DeviceCaps& info = driver::device_caps(device);
  ops::XqaPlan plan = ops::plan_xqa(args, spec::arch_for_device(info.sm_major, info.sm_minor), info.sm_count);
  ops::DecodeLaunch l;
  l.spec = &plan.spec;
  l.device = device;
  l.shape = plan.shape;
  l.sm_count = args.sm_count.value_or(0);
  l.workspace = args.workspace_buffer.data;
  l.workspace_bytes = plan.workspace_bytes;
  l.semaphores = static_cast<unsigned*>(args.semaphores.data);
  l.semaphore_count = plan.semaphore_count;
  l.pdl = args.enable_pdl.value_or(true) && info.sm_major >= 9;
  ops::launch_decode(runtime ? *runtime : Runtime::global(), l, plan.params, stream);
}

}  // namespace attnjit
