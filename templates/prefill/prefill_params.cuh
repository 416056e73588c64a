// PrefillParams: the by-value parameter block of the prefill kernel family (FIA),
// with the host-planned work list inline. Plain C types only: the host includes it.
#pragma once

namespace attnjit {

// Compile-time switches of the prefill kernel, as the renderer writes them. They
// equal spec::MaskMode (a CPU test checks).
namespace prefill_mask {
constexpr int kNone = 0;    // only the KV length bounds a row
constexpr int kBand = 1;    // the band rule (sparse modes 2-4), no mask tensor read
constexpr int kTensor = 2;  // the atten_mask tensor and the band rule
}

// The rarer switches (the Traits' kExt bits; 0 renders as before). Each gates its
// code with if constexpr, so the variants without it compile as they always did.
namespace prefill_ext {
constexpr unsigned kLeftPad = 1u;  // query/kv_padding_size: valid windows [S - pad - len, S - pad)
constexpr unsigned kPrefix = 2u;   // key/value_shared_prefix: a batch's KV is [prefix | own KV]
constexpr unsigned kInt8Out = 4u;  // int8 attention_out: clamp(round(o * quant_scale2 + quant_offset2))
constexpr unsigned kKvInt8 = 8u;    // int8 K/V (antiquant): (x + offset) * scale per k_dq / v_dq
constexpr unsigned kKvInt4 = 16u;   // int4 K/V packed eight to an int32, low nibble first (antiquant)
constexpr unsigned kQInt8 = 32u;    // int8 query (the full int8 path): the dequantising pass copies Q too
}

// Dequantisation of quantised K or V (kKvInt8, kKvInt4): element d of KV head h at
// position pos is (x + offset) * scale, scale and offset at
//   sb * b + sh * h + ss * pos + sd * d                  (paged = 0)
//   sb * block + sh * h + ss * (pos % page) + sd * d     (paged = 1: the modes whose
//                                                         scales a block table manages)
// pos is the physical token (kv_tok0 + j) of contiguous KV and the logical one (j) of
// paged KV. Zero strides make the per-tensor, per-head, per-channel and per-token
// modes one formula. offset null: symmetric (no offset).
namespace prefill_dq {
constexpr int kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2;  // the scale's and offset's dtype (load_as_float's codes)
}
struct PrefillDequant {
  const void* scale;
  const void* offset;
  long long sb, sh, ss, sd;
  int dtype;  // prefill_dq
  int paged;
};

// The dequantising pass's output (the plan's dequant-first path): dense 16-bit copies of
// K and V, row (b, token, h) at b * sb + token * ss + h * sh (elements), which the
// 16-bit attention kernel then reads with the same strides.
struct PrefillDequantOut {
  void* k;
  void* v;
  long long k_sb, k_ss, k_sh, v_sb, v_ss, v_sh;
  // The full int8 path (kQInt8): the query's copy, dense (b, token, h) like K's, and the
  // per-tensor fp32 scales on device. Q and K take sqrt(dequant_scale1) each (their
  // product carries it into the scores; neither copy leaves fp16's normal range for
  // scales >= ~1e-8), V takes quant_scale1 * dequant_scale2 (the seed's P quantisation
  // and BMM2 dequantisation, P itself staying 16-bit).
  void* q;
  long long q_sb, q_ss, q_sh;
  const float* dequant_scale1;
  const float* quant_scale1;
  const float* dequant_scale2;
};

// Batches one launch covers: the work list travels in the Params (no device
// buffer, so a launch allocates nothing and captures cleanly); larger batches
// launch once per chunk of this many. Keeps sizeof(PrefillParams) under 4 KB.
constexpr int kPrefillMaxBatches = 96;
// A band bound meaning "unbounded": far beyond any sequence (<= 2^25 here), and
// far from int overflow when a row index and d are added.
constexpr int kPrefillBandInf = 1 << 30;

// One batch of the work list. A batch's CTAs are tiles [tile_begin, tile_begin +
// compute_tiles) computing rows, then zero tiles that clear rows past q_len (up
// to q_seq for padded layouts). Rows are (query token, head in group) pairs,
// token-major: row r is token r / group, head kv_head * group + r % group, so the
// group's heads share each K/V tile (the MMA's M dimension).
struct PrefillBatch {
  int q_len;          // actual query tokens
  int kv_len;         // actual KV tokens
  int q_tok0;         // first query token (TND: cumulative offset; else 0)
  int kv_tok0;        // first KV token (TND; else 0)
  int tile_begin;     // first CTA (blockIdx.x) of this batch
  int compute_tiles;  // ceil(q_len * group / kRows)
};

// A CUtensorMap as the kernel sees it (128 opaque bytes; the driver needs 64-byte alignment).
struct alignas(64) PrefillTensorMap {
  unsigned long long opaque[16];
};

struct PrefillParams {
  // K and V as TMA tensor maps (the wgmma kernel, kv_tma = 1): 4-D, the head dim
  // innermost, then the head, token and batch dims in the order of their strides
  // (map_dim_* says where each went; TND has a batch dim of 1; paged K/V maps blocks as
  // its batch and a block's slots as its tokens), boxes of 64 dims x the KV tile's
  // tokens, 128-byte swizzled.
  PrefillTensorMap k_map, v_map;
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;                  // optional natural-log LSE per (batch, token, head)
  const unsigned char* mask;   // optional (kTensor): nonzero = masked out
  const void* pse;             // optional: added to the scaled scores (q's dtype)
  const int* block_table;      // paged KV: [batch][max_blocks]

  // Element strides. Token t of batch b, head h: base + b*stride_b + t*stride_s + h*stride_h.
  // Paged K/V: stride_b is the block stride and t the offset inside the block.
  long long q_stride_b, q_stride_s, q_stride_h;
  long long k_stride_b, k_stride_s, k_stride_h;
  long long v_stride_b, v_stride_s, v_stride_h;
  long long o_stride_b, o_stride_s, o_stride_h;
  long long lse_stride_b, lse_stride_s, lse_stride_h;
  long long mask_stride_b, mask_stride_s;  // column stride 1
  long long pse_stride_b, pse_stride_h, pse_stride_s;  // column stride 1
  long long block_table_stride_b;

  int group;          // query heads per KV head
  int num_batches;    // entries of `batches` used by this launch
  int first_batch;    // global batch index of batches[0]
  int q_seq;          // rows past q_len up to q_seq * group are zero-filled
  int block_size;     // paged KV tokens per block (0: contiguous)
  // Band: key j is visible from query i iff band_lo <= j - i - shift <= band_hi,
  // shift = band_shift ? kv_len - q_len : 0 (rightDownCausal and band modes).
  int band_lo, band_hi, band_shift;
  float scale;        // multiplies q.k before pse is added
  int kv_tma;         // 1: K/V tiles through k_map/v_map; 0: cp.async gathers (strides TMA cannot take, or pages that split a tile)
  int kv_map_tokens;  // the maps' token extent: rows past it read as 0
  int map_dim_h, map_dim_s, map_dim_b;  // the map dimension (1-3) of the head, token and batch coordinates
  // The wgmma kernel's work items: tile t of KV head hk is item hk * tiles + t; CTA
  // blockIdx.x takes items blockIdx.x, + gridDim.x, ... (one each when the grid covers them).
  int tiles, kv_heads;
  // Dynamic schedule: [0] the next item, [1] CTAs done (the last resets both to 0);
  // null: static, CTA blockIdx.x takes items blockIdx.x, + gridDim.x, ...
  unsigned* item_counter;
  PrefillBatch batches[kPrefillMaxBatches];

  // The rarer switches' fields come last: the other variants' offsets stay as they were.
  // Left padding (kLeftPad): the int64 pads in device memory, read by the kernel (a
  // host read would sync and break graph capture); null: that side is right-padded.
  // Stride 0: one value for every batch, 1: one per batch. Negative pads count as 0;
  // a window that does not fit (S - pad - len < 0) leaves the batch's rows 0.
  const long long* q_pad;
  const long long* kv_pad;
  int q_pad_stride, kv_pad_stride;
  int kv_seq;  // the KV tensor's S: the KV window ends at kv_seq - pad
  // Shared prefix (kPrefix): K/V (1, prefix_seq tokens) in the key's layout; its
  // length on device (null: prefix_seq), clamped to [0, prefix_seq].
  const void* kp;
  const void* vp;
  long long kp_stride_s, kp_stride_h, vp_stride_s, vp_stride_h;
  const long long* prefix_len;
  int prefix_seq;
  // int8 output (kInt8Out): scale and optional offset of output channel (h, d) at
  // h * quant_stride_h + d * quant_stride_d (both 0: per tensor); fp32 or bf16.
  const void* quant_scale;
  const void* quant_offset;
  int quant_stride_h, quant_stride_d;
  int quant_bf16;
  // Quantised K/V (kKvInt8, kKvInt4): their dequantisation. K/V strides then count
  // int8 elements, or int32 words of eight int4 values.
  PrefillDequant k_dq, v_dq;
  PrefillDequantOut dq_out;  // the dequantising pass (spec feature dqpass) only
};

}  // namespace attnjit
