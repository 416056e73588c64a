// batch_decode_mla: DeepSeek MLA decode over a paged latent KV cache (512 + 64),
// with the semantics and argument names of flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "attnjit/runtime.hpp"
#include "attnjit/tensor.hpp"
#include "attnjit/types.hpp"

namespace attnjit {

enum class LseBase { kE, kTwo };

struct MlaArgs {
  // [batch, q_len_per_request, num_heads, 576]: q_nope (512) then q_rope (64). bf16 or fp16,
  // or fp8_e4m3 with an fp8_e4m3 kv_cache.
  // Query t of a request sees KV positions < seq_len - q_len + t + 1 (causal among the queries).
  // Limits beyond the seed's: q_len_per_request 1 to 16 (MTP), num_heads 1 to 128.
  TensorView query;
  // [num_pages, page_size, 576] or [num_pages, 1, page_size, 576], page_size 16, 32, 64 or 128:
  // ckv (512) then kpe (64), the query's dtype or fp8_e4m3 (FlashInfer's trtllm-gen pairs). K is
  // all 576 dims, V the first 512.
  // fp8 KV is widened to fp16 for the MMA (exact), and a bf16 query rounded to fp16 once: |q|
  // must stay within fp16's range (65504) there. k_scale and v_scale go into bmm1/bmm2_scale.
  TensorView kv_cache;
  // uint8, >= mla_workspace_bytes(...), 256-byte aligned, zeroed once before its first use (as the
  // seed asks); calls of any shape keep it consistent after that. Needed only when a call splits the KV.
  TensorView workspace_buffer;
  int qk_nope_head_dim = 128;  // checked: 128
  int kv_lora_rank = 512;      // checked: 512
  int qk_rope_head_dim = 64;   // checked: 64
  TensorView block_tables;     // int32 [batch, max_pages_per_seq]; rows may be apart (a column slice)
  TensorView seq_lens;         // int32 (or uint32) [batch]: KV lengths
  // >= 1; at most max_pages_per_seq * page_size. The splits are planned over it, so every
  // seq_lens[b] must be <= max_seq_len (as the seed's "maximum sequence length" says).
  int max_seq_len = 0;
  // > 0: sparse MLA (DeepSeek-V3.2, FlashMLA's sparse decode): each query row attends only to
  // its own `indices`, physical token positions page * page_size + slot; -1 (or any position
  // outside the cache) is unused. No causal mask or seq_lens limit applies then.
  int sparse_mla_top_k = 0;
  TensorView indices;          // int32 [batch, q_len_per_request, sparse_mla_top_k] (sparse only)
  // Required (a departure from the seed, which allocates it): [batch, q_len, num_heads, 512],
  // the query's dtype; bf16 for an fp8_e4m3 query (as FlashInfer writes).
  TensorView out;
  // Fused scales: bmm1 = q_scale * k_scale * sm_scale / sqrt(576), bmm2 = v_scale * o_scale.
  // A device fp32 pointer (CUDA-graph friendly) wins over the host float.
  ScaleArg bmm1_scale = 1.0f;
  ScaleArg bmm2_scale = 1.0f;
  TensorView sinks;            // optional fp32 [num_heads]: logits added to the softmax denominator
  // Optional (beyond the seed): fp32 [batch * q_len, num_heads] log-sum-exp of the scaled
  // logits (sinks included), in base lse_base.
  TensorView lse;
  LseBase lse_base = LseBase::kE;
  std::optional<bool> enable_pdl;  // default: on where supported (sm_90+)
  std::optional<int> sm_count;     // inferred when absent
  // auto: on sm_90a the wgmma kernel (trtllm-gen), 16-bit or fp8 KV; xqa elsewhere. Dense fp8
  // pages land by TMA there: a cache view whose rows or pages overlap goes to xqa (an explicit
  // trtllm-gen names kv_cache).
  Backend backend = Backend::kAuto;
};

// Workspace bytes any call with at most this batch, num_heads, q_len and max_seq_len (for
// sparse: top_k) may need on a GPU with sm_count SMs: an upper bound over the op's split
// choices. One buffer serves one stream at a time. Bad arguments throw Error naming them.
size_t mla_workspace_bytes(int batch, int num_heads, int q_len_per_request, int max_seq_len, int sm_count,
                           int sparse_mla_top_k = 0);

void batch_decode_mla(const MlaArgs& args, Stream stream = nullptr, Runtime* runtime = nullptr);

// Compiles, or finds in the store, the kernel this call would launch on `arch` ("sm_90a";
// empty: the current GPU's, and then also loads it). Shapes only: data may be null.
std::string prewarm_mla(const MlaArgs& args, const std::string& arch = "", Runtime* runtime = nullptr);

}  // namespace attnjit
