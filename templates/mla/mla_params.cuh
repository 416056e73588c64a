// MlaParams: the one by-value parameter block of the MLA decode kernels (576/512
// heads, paged latent KV). Plain C types only: the host includes this file too.
#pragma once

#if defined(__CUDACC__)
#define ATTNJIT_HOST_DEVICE __host__ __device__
#else
#define ATTNJIT_HOST_DEVICE
#endif

namespace attnjit {

namespace mla_const {
constexpr int kHeadDimQk = 576;   // kv_lora_rank 512 + qk_rope_head_dim 64
constexpr int kHeadDimVo = 512;   // V is the first 512 dims of the same cache row
constexpr int kRowsPerCta = 16;   // query rows (head x query token) in one CTA's M
constexpr int kTileTokens = 32;   // KV tokens per shared-memory tile
constexpr int kWarps = 4;
constexpr int kMaxSplits = 256;
// Feature bits the kernel reads; equal to spec::feature (a CPU test checks).
constexpr unsigned kFeatSinks = 1u << 2, kFeatLse = 1u << 3, kFeatScalePtr = 1u << 4;
}  // namespace mla_const

struct MlaParams {
  const void* q;               // row (b, t, h) at q + b*q_stride_b + t*q_stride_t + h*q_stride_h
  const void* kv;              // token (page, slot) at kv + page*kv_stride_page + slot*kv_stride_tok
  void* out;                   // [b][t][h][512], o_stride_*
  float* lse;                  // optional [b * q_len + t][h]
  const int* block_tables;     // [batch][pages_per_seq] (dense)
  const int* seq_lens;         // [batch] KV lengths
  const int* indices;          // sparse: [batch][q_len][top_k] page * page_size + slot, -1 unused
  const float* sinks;          // optional [num_heads], natural-log logits
  const float* bmm1_scale_ptr; // optional device scales (win over the host floats)
  const float* bmm2_scale_ptr;
  float* workspace;            // split-KV partials (after the semaphores)
  unsigned* semaphores;        // one per (batch, row block); self-resetting

  long long q_stride_b, q_stride_t, q_stride_h;
  long long o_stride_b, o_stride_t, o_stride_h;
  long long kv_stride_page, kv_stride_tok;
  long long bt_stride_b;
  long long idx_stride_b, idx_stride_t;

  int batch;
  int num_heads;
  int q_len;
  int pages_per_seq;
  long long num_tokens;        // num_pages * page_size: sparse indices at or past it are unused
  int top_k;                   // sparse: indices per query row (0: dense)
  int rows_per_group;          // dense: q_len * num_heads (one group); sparse: num_heads per query token
  int row_blocks;              // ceil(rows_per_group / 16); gridDim.y = groups * row_blocks
  int num_splits;              // gridDim.x
  int tokens_per_split;        // multiple of kTileTokens
  float bmm1_scale;
  float bmm2_scale;
  int lse_base2;               // 1: LSE in base 2, 0: natural log
};

// Workspace floats per (batch, row block, split): 16 rows x 512 partial O, then 16 maxima, 16 sums.
ATTNJIT_HOST_DEVICE inline int mla_partial_floats() { return mla_const::kRowsPerCta * (mla_const::kHeadDimVo + 2); }

}  // namespace attnjit
