// single_decode_with_kv_cache: one request's decode step over a contiguous KV,
// with the semantics and argument names of flashinfer.decode.single_decode_with_kv_cache.
#pragma once

#include <optional>
#include <string>

#include "attnjit/runtime.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

struct SingleDecodeOptions {
  KvLayout kv_layout = KvLayout::kNHD;
  PosEncodingMode pos_encoding_mode = PosEncodingMode::kNone;
  bool use_tensor_cores = true;  // FlashInfer's hint; no effect (see below)
  float q_scale = 1.0f;          // fp8 inputs: dequantization scales
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  int window_left = -1;          // -1: the whole sequence
  float logits_soft_cap = 0.0f;  // > 0: logits = cap * tanh(logits / cap); <= 0: off (finite)
  std::optional<float> sm_scale; // default 1/sqrt(head_dim)
  float rope_scale = 1.0f;
  float rope_theta = 1e4f;
  Backend backend = Backend::kAuto;
  bool enable_pdl = false;
};

// q: [num_qo_heads, head_dim] fp16/bf16. k, v: [kv_len, num_kv_heads, head_dim] (NHD)
// or [num_kv_heads, kv_len, head_dim] (HND), q's dtype or fp8 e4m3/e5m2; v's head_dim is
// k's (head_dim_vo == head_dim). num_qo_heads / num_kv_heads at most 256 (16 past head_dim 256).
// out: q's shape and dtype, written in place. lse (optional, return_lse):
// fp32 [num_qo_heads], base-2 log-sum-exp of the scaled logits (FlashInfer's convention).
// Long kv_len is split across SMs automatically. The split scratch lives in the
// Runtime, one per (device, stream) used, and is kept for the Runtime's lifetime
// (a captured graph may point at it): a host that creates streams without end
// should launch on a bounded set of them.
// Conventions: logits = q.k * sm_scale (times q_scale * k_scale); with a soft cap,
// cap * tanh(logits / cap); ALiBi then adds slope_h * (kv_pos - q_pos), q at
// kv_len - 1. Where this departs from FlashInfer: FlashInfer measures the ALiBi
// bias from position 0, so with ALiBi its LSE is larger by slope_h * (kv_len - 1)
// * log2(e) (outputs equal); and it adds the bias before the soft cap, so with both
// ALiBi and a soft cap the outputs differ (no common model uses both). With fp8 k/v
// the tensor cores run in fp16: q elements must stay within fp16 range (|q| < 65504).
// use_tensor_cores is accepted for FlashInfer's signature and changes nothing: both
// values run the tensor-core kernel. A CUDA-core (FFMA) kernel was 2.1-3.1x slower at
// groups 1-8 and KV lengths 512-32K on an H200 (docs/PERFORMANCE.md), so it was removed.
void single_decode_with_kv_cache(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& out, const SingleDecodeOptions& options = {},
                                 Stream stream = nullptr, const TensorView* lse = nullptr,
                                 Runtime* runtime = nullptr);

// Compiles, or finds in the store, the kernel this call would launch on `arch`
// ("sm_90a"; empty: the current GPU's, and then it is also loaded on the current
// device, so the call may then be captured in a CUDA graph). Tensor data may be
// null. Returns the kernel's readable name; with an arch it needs no GPU. The
// split-KV scratch this op uses grows on first use per stream: run the op once
// on the capturing stream's shapes before capture as well.
std::string prewarm_single_decode_with_kv_cache(const TensorView& q, const TensorView& k,
                                                const TensorView& v, const TensorView& out,
                                                const SingleDecodeOptions& options = {},
                                                const TensorView* lse = nullptr,
                                                const std::string& arch = "", Runtime* runtime = nullptr);

}  // namespace attnjit
