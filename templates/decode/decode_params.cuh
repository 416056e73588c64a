// DecodeParams: the one by-value parameter block of the GQA decode kernel family
// (single_decode and xqa). Plain C types only: the host includes this file too.
#pragma once

#if defined(__CUDACC__)
#define ATTNJIT_HOST_DEVICE __host__ __device__
#else
#define ATTNJIT_HOST_DEVICE
#endif

namespace attnjit {

// Compile-time switches of the decode kernels, as the renderer writes them. They
// equal spec::MaskMode, spec::PosEncoding and spec::feature (a CPU test checks).
namespace mask_mode {
constexpr int kNone = 0, kCausal = 1, kCustom = 2;
}
namespace pos_mode {
constexpr int kNone = 0, kRope = 1, kAlibi = 2;
}
namespace feat {
constexpr unsigned kSoftCap = 1u << 0, kWindow = 1u << 1, kSinks = 1u << 2, kLse = 1u << 3,
                   kScalePtr = 1u << 4, kRaggedQ = 1u << 6,  // 1 << 5 was the CUDA-core tile's
                   kKTokScale = 1u << 11, kVTokScale = 1u << 12, kKvPair = 1u << 14,
                   kTokHead = 1u << 15;
}

struct DecodeParams {
  const void* q;             // rows addressed as q + b*q_stride_b + t*q_stride_t + h*q_stride_h
  const void* k;             // paged: + page*k_stride_page; contiguous: + b*k_stride_page (the batch stride)
  const void* v;
  void* out;                 // same addressing as q, with o_stride_*
  float* lse;                // optional: [b][t][h] with lse_stride_b / lse_stride_t
  const int* page_table;     // [batch][pages_per_seq] (paged only)
  const unsigned* seq_lens;  // [batch] KV length; null: every request has kv_len
  const unsigned* q_cu_seq_lens;  // optional ragged spec-decode offsets [batch + 1]
  const unsigned* mask;      // spec-decode bit mask, 32-bit words [b][t][mask_words]
  const float* sinks;        // optional [num_q_heads]
  const float* q_scale_ptr;  // optional device scales (feature kScalePointers)
  const float* kv_scale_ptr;  // replaces both k_scale and v_scale
  float* workspace;          // split-KV partials
  unsigned* semaphores;      // one counter per (batch, kv head, row block); self-resetting

  long long q_stride_b, q_stride_t, q_stride_h;
  long long o_stride_b, o_stride_t, o_stride_h;
  long long lse_stride_b, lse_stride_t;
  long long k_stride_page, k_stride_tok, k_stride_head;
  long long v_stride_page, v_stride_tok, v_stride_head;
  long long mask_stride_b, mask_stride_t;

  int batch;
  int num_kv_heads;
  int q_seq_len;       // query tokens per request (max when ragged)
  int kv_len;          // used when seq_lens is null
  int pages_per_seq;
  int row_blocks;      // ceil(q_seq_len * group / rows_per_cta): gridDim.y / num_kv_heads
  int num_splits;      // gridDim.x
  int tokens_per_split;  // multiple of the tile

  float sm_scale;      // softmax scale before any q/kv scale
  float q_scale;       // host scales (used when the pointers are null)
  float k_scale;       // multiplies the logits
  float v_scale;       // multiplies the output
  float rcp_out_scale; // fp8 output: out = o * rcp_out_scale
  float soft_cap;
  int window_left;     // -1: off; keys >= q_pos - window_left are visible
  float rope_rcp_scale;
  float rope_rcp_theta;
  int rows_per_cta;    // 16, kDecodeDualMRows (Traits::kDualM) or kDecodeSplitMRows (Traits::kSplitM)

  // int8 K/V (FIA's antiquant, KVT i8_t): scales that vary by KV head h and channel d
  // only, at h * sh + d * sd (0 strides: per tensor or head); dtype 0 fp32, 1 fp16,
  // 2 bf16. K's multiply q's dims (K's offset shifts every score of a row alike,
  // which softmax drops: the host routes no LSE here); out = (o + v_off) * v_scale.
  const void* k_chan;
  const void* v_chan;
  const void* v_chan_off;  // null: no offset
  long long kc_sh, kc_sd, vc_sh, vc_sd;
  int k_chan_dtype, v_chan_dtype;

  // int8 K/V with per-token fp32 scales (features kKTokScale / kVTokScale): [0] K, [1] V.
  // Token tok of request b and KV head h sits at b * sb + h * sh + tok * ss, or, page-managed
  // (paged = 1), at page * sb + h * sh + (tok % page_size) * ss. The kernel applies them
  // around the MMAs: s = (q.k + off * sum(q)) * scale per key, p * scale per key before
  // P V with sum(p * scale * off) added to every output dim (gqa_decode.cuh).
  const float* tok_scale[2];
  const float* tok_off[2];  // null: no offset
  long long tok_sb[2], tok_sh[2], tok_ss[2];
  int tok_paged[2];
};

// Query rows per CTA of a split-M kernel (decode_split_m.cuh): one 16-row MMA M tile per warp.
constexpr int kDecodeSplitMRows = 64;
// Query rows per CTA of the dual-M loop (decode_dual_m.cuh): two 16-row M tiles per warp.
constexpr int kDecodeDualMRows = 32;

// Where a request's KV walk starts: 0, or with a window the first tile holding a
// key some query row sees (row t sits at seq_len - q_len + t and sees keys from its
// position - window_left on), rounded down to a whole tile so that no tile straddles
// a page. Positions stay logical: only the range walked shrinks. The kernel's setup
// and the host's plan tests (tests/unit/decode_window_plan_test.cpp) both call this.
ATTNJIT_HOST_DEVICE inline int decode_kv_begin(int seq_len, int q_len, int window_left, int tile) {
  if (window_left < 0) return 0;
  const int begin = seq_len - q_len - window_left;
  return begin > 0 ? begin - begin % tile : 0;
}

// One split CTA's share [lo, hi) of a request's walk [kv_begin, seq_len): splits of
// tokens_per_split from kv_begin, the request's last split (at most num_splits)
// taking what is left. The host plans over the visible span (window_left + q_len),
// so the start's rounding to a tile leaves that last split at most a tile longer.
struct DecodeSplitRange {
  int n_splits;  // splits this request uses; CTAs at or past it have nothing to do
  int lo, hi;
};
ATTNJIT_HOST_DEVICE inline DecodeSplitRange decode_split_range(int kv_begin, int seq_len, int split, int num_splits,
                                                               int tokens_per_split) {
  const int n_tok = seq_len > kv_begin ? seq_len - kv_begin : 0;
  int n = (n_tok + tokens_per_split - 1) / tokens_per_split;
  n = n < 1 ? 1 : (n > num_splits ? num_splits : n);
  DecodeSplitRange r;
  r.n_splits = n;
  r.lo = kv_begin + split * tokens_per_split;
  const int end = r.lo + tokens_per_split;
  r.hi = split == n - 1 || end > seq_len ? seq_len : end;
  return r;
}

// Workspace floats per (batch, kv head, 16-row block, split): 16 rows x (head_dim + 2).
// A split-M CTA (64 rows) writes the partials of its four 16-row blocks.
ATTNJIT_HOST_DEVICE inline int decode_partial_floats(int head_dim) { return 16 * (head_dim + 2); }

}  // namespace attnjit
