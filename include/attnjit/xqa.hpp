// xqa: paged-KV GQA decode (and speculative decoding) with the semantics and
// argument names of flashinfer.xqa.xqa.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "attnjit/runtime.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

struct XqaArgs {
  // [batch, beam_width, num_q_heads, head_dim], or with q_seq_len > 1
  // [batch, beam_width, q_seq_len, num_q_heads, head_dim]; ragged drafts
  // (q_cu_seq_lens set): [total_q_tokens, num_q_heads, head_dim]. fp16/bf16.
  TensorView q;
  // fp8 KV runs the tensor cores in fp16 (exact for e4m3): q must stay within fp16 range.
  TensorView k_cache;    // [num_pages, page_size, num_kv_heads, head_dim] (NHD) or
  TensorView v_cache;    // [num_pages, num_kv_heads, page_size, head_dim] (HND)
  TensorView page_table; // int32 [batch, pages_per_seq], contiguous, shared by K and V
  TensorView seq_lens;   // uint32 [batch, beam_width]
  TensorView output;     // q's shape; q's dtype, or fp8 e4m3 with fp8 KV
  TensorView workspace_buffer;  // uint8, >= xqa_workspace_bytes(...)
  TensorView semaphores;        // uint32, >= xqa_semaphore_count(...), zeroed once
  int num_kv_heads = 0;         // num_q_heads / num_kv_heads (the group) 1 to 64; <= 16 past head_dim 256
  int page_size = 0;            // 16, 32, 64 or 128
  TensorView sinks;             // optional fp32 [num_kv_heads, head_group_ratio]
  ScaleArg q_scale = 1.0f;
  ScaleArg kv_scale = 1.0f;     // dequantizes fp8 K/V; ignored for fp16/bf16 K/V (as FlashInfer)
  int sliding_win_size = 0;     // 0: off; else the last sliding_win_size keys are visible
  KvLayout kv_layout = KvLayout::kNHD;
  std::optional<int> sm_count;  // inferred when absent
  std::optional<bool> enable_pdl;  // default: on where supported (sm_90+)
  float rcp_out_scale = 1.0f;   // fp8 output: out = o * rcp_out_scale (ignored otherwise)
  int q_seq_len = 1;            // > 1: speculative decoding, needs mask (the longest draft when ragged);
                                // at 1 (and no q_cu_seq_lens) a mask is ignored
  TensorView mask;              // uint16 [batch, q_seq_len, ((q_seq_len + 31) / 32) * 2]; ragged:
                                // [total_q_tokens, ...], row q_cu_seq_lens[b] + t (XQA's packing)
  TensorView q_cu_seq_lens;     // optional uint32 [batch + 1]: ragged draft lengths, each <= q_seq_len
  Backend backend = Backend::kAuto;
};

// Workspace and semaphores that any call with at most this batch, these head
// counts, at most this q_seq_len and max_seq_len (= pages_per_seq * page_size),
// and this head_dim may need on a GPU with sm_count SMs: an upper bound over the
// op's split choices, so one buffer sized for the largest call serves every call.
// Semaphores are zeroed once by the caller and stay reusable: every launch leaves
// them at zero. One workspace/semaphore pair serves one stream at a time: launches
// that may run concurrently (other streams, graphs replayed side by side) each
// need their own pair. Bad arguments throw Error(kInvalidArgument) naming them.
size_t xqa_workspace_bytes(int batch, int num_kv_heads, int head_group_ratio, int q_seq_len,
                           int head_dim, int max_seq_len, int sm_count);
size_t xqa_semaphore_count(int batch, int num_kv_heads, int head_group_ratio, int q_seq_len);

void xqa(const XqaArgs& args, Stream stream = nullptr, Runtime* runtime = nullptr);

// Compiles, or finds in the store, the kernel this call would launch on `arch`
// ("sm_90a"; empty: the current GPU's, and then it is also loaded on the current
// device, so the call may then be captured in a CUDA graph). Only shapes, dtypes
// and options matter: tensor data may be null. Returns the kernel's readable
// name. With an arch it needs no GPU. Run it at start-up or before capture.
std::string prewarm_xqa(const XqaArgs& args, const std::string& arch = "", Runtime* runtime = nullptr);

}  // namespace attnjit
