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
// The wgmma (trtllm-gen, sm_90a) kernel: 64 rows per CTA, 64-token tiles, two stages.
constexpr int kHopperRows = 64;
constexpr int kHopperTile = 64;
// Its narrow tile (mla_hopper_narrow.cuh, kFeatNarrow): CTAs of at most 16 rows, in wgmma's N;
// kFeatNarrow32: at most 32 (16-bit KV).
constexpr int kNarrowRows = 16;
constexpr int kNarrow32Rows = 32;
// Feature bits the kernel reads; equal to spec::feature (a CPU test checks).
constexpr unsigned kFeatSinks = 1u << 2, kFeatLse = 1u << 3, kFeatScalePtr = 1u << 4;
// FIA's MLA (query_rope/key_rope): nope and rope dims in separate tensors, per-batch query
// lengths, FIA's LSE (natural log, strided, +inf for a row that sees nothing).
constexpr unsigned kFeatSplitRope = 1u << 8;
// The wgmma kernel's narrow tile (kNarrowRows rows in N, tokens in M): spec::feature::kNarrowTile.
constexpr unsigned kFeatNarrow = 1u << 16;
constexpr unsigned kFeatNarrow32 = 1u << 17;  // spec::feature::kNarrow32
// The wide tile in 32-token tiles, four KV buffers in the two's bytes (spec::feature::kTile32):
// a tile's loads start two pairs of tiles before its S, not one (16-bit dense KV).
constexpr unsigned kFeatTile32 = 1u << 18;
constexpr int kHopperTile32 = 32;
// The wide tile's balanced ("flat") schedule (spec::feature::kFlat): gridDim.y parts, each a
// contiguous range of the batch's tiles laid end to end, across request boundaries.
constexpr unsigned kFeatFlat = 1u << 19;
constexpr int kNopeDims = 512;   // kv_lora_rank: the dims q/kv hold under kFeatSplitRope
// The narrow tile (mla_hopper_narrow_ring.cuh): a producer warpgroup beside the two math
// ones, and a ring of 64-token x 64-dim blocks (8 KB of 16-bit KV, 4 KB of fp8) in what
// sm_90's 227 KB leave.
constexpr int kRingThreads = 384;
constexpr int kHopperSmemLimit = 227 * 1024;
}  // namespace mla_const

// The wide tile (MlaHopperTraits; carved in mla_hopper_io.cuh): 128 tokens of KV in buffers
// of `tile` tokens (two of 64, or four of 32: tile32).
ATTNJIT_HOST_DEVICE constexpr int mla_wide_buffers(int tile) { return 2 * mla_const::kHopperTile / tile; }
// Its shared memory: 1024 of alignment slack, Q (9 blocks of 64 rows x 128 bytes), the KV
// buffers, A's P (a block); then 320 floats of row statistics, the sparse rows' flags (an int
// a buffered token), a full mbarrier per buffer and column block, 48 bytes for the split flag
// and the flat schedule's walk state (MlaHopperLoop::FlatState), two staged mbarriers per
// buffer (fp8).
ATTNJIT_HOST_DEVICE constexpr int mla_wide_smem_bytes(int tile, bool sparse) {
  return 1024 + 9 * 64 * 128 + mla_wide_buffers(tile) * 9 * tile * 128 + 64 * 128 +
         (320 + (sparse ? mla_wide_buffers(tile) * tile : 0) + mla_wide_buffers(tile) * 18 + 12) * 4 +
         2 * mla_wide_buffers(tile) * 8;
}

// A ring block's bytes: 64 tokens x 64 dims of KV elements of kv_bytes.
ATTNJIT_HOST_DEVICE constexpr int mla_ring_block_bytes(int kv_bytes) { return 64 * 64 * kv_bytes; }
// The ring tile's shared memory (rows: 16 or 32): 1024 of alignment slack, Q's rows (16-bit: 9
// blocks of rows x 128 bytes), the two warpgroups' P^T, 12 rows floats of statistics, the split
// flag; then per slot its block and three mbarriers (two full, one empty).
ATTNJIT_HOST_DEVICE constexpr int mla_ring_fixed_bytes(int rows) {
  return 1024 + 9 * rows * 128 + 2 * rows * 128 + 12 * rows * 4 + 16;
}
ATTNJIT_HOST_DEVICE constexpr int mla_ring_slots(int rows, int kv_bytes) {
  return (mla_const::kHopperSmemLimit - mla_ring_fixed_bytes(rows)) / (mla_ring_block_bytes(kv_bytes) + 3 * 8);
}
ATTNJIT_HOST_DEVICE constexpr int mla_ring_smem_bytes(int rows, int kv_bytes) {
  return mla_ring_fixed_bytes(rows) + mla_ring_slots(rows, kv_bytes) * (mla_ring_block_bytes(kv_bytes) + 3 * 8);
}

// The ring's schedule. Block g = 9 t + cb (column block cb of the CTA's tile t) is fill
// g / slots of slot g % slots, loaded in order of g by the producer. The math warpgroups take
// alternate tiles from the one ring, so a warpgroup may wait for a slot's fill f while fill
// f - 1 (the other warpgroup's) has not landed: with one full barrier a slot, a parity wait
// would pass on fill f - 2's phase. Fills alternate between two full barriers a slot; when a
// warpgroup waits at tile t it has read tile t - 2, whose loads waited for the release of
// blocks up to 9 (t - 2) + 8 - slots, past fill f - 2 of any slot (slots >= 18), so that fill
// has landed and the barrier's phase is the one wanted. Releases (the empty barrier) happen in
// fill order per slot, and the producer waits for them in order: one barrier serves.
// Fill `fill` of slot `slot`: its full barrier and the parity its wait takes.
ATTNJIT_HOST_DEVICE inline int mla_ring_full_at(int slot, int fill, int slots) { return (fill % 2) * slots + slot; }
ATTNJIT_HOST_DEVICE inline unsigned mla_ring_full_phase(int fill) { return unsigned(fill / 2) & 1u; }
ATTNJIT_HOST_DEVICE inline int mla_ring_full_index(int g, int slots) { return mla_ring_full_at(g % slots, g / slots, slots); }
ATTNJIT_HOST_DEVICE inline unsigned mla_ring_full_parity(int g, int slots) { return mla_ring_full_phase(g / slots); }
// Block g >= slots first waits for the release of block g - slots (the slot's previous fill).
ATTNJIT_HOST_DEVICE inline unsigned mla_ring_empty_parity(int g, int slots) { return unsigned(g / slots - 1) & 1u; }

// A CUtensorMap as the kernel sees it (128 opaque bytes; the driver needs 64-byte alignment).
struct alignas(64) MlaTensorMap {
  unsigned long long opaque[16];
};

struct MlaParams {
  // The trtllm-gen kernel's dense KV as a TMA tensor map (kv_tma = 1): 3-D (576 dims, page
  // slots, pages), boxes of 64 dims x min(page_size, 64) slots, 128-byte swizzled. kv_tma = 0:
  // the kernel copies rows with cp.async (always for sparse indices).
  MlaTensorMap kv_map;
  int kv_tma;
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
  int row_blocks;              // ceil(rows_per_group / the kernel's rows per CTA); gridDim.y = groups * row_blocks
  int num_splits;              // gridDim.x of the attention pass
  // 0: the attention pass, its last CTA per row block merging the splits (semaphores);
  // 1: the attention pass writing partials only, a combine launch (2) merging them after:
  // grid (row groups of a CTA's rows, the attention pass's y and z), every SM busy.
  int split_pass;
  int tokens_per_split;        // multiple of kTileTokens
  float bmm1_scale;
  float bmm2_scale;
  int lse_base2;               // 1: LSE in base 2, 0: natural log

  // kFeatSplitRope only (FIA): q and kv above hold the 512 nope dims, these the 64 rope dims.
  const void* q_rope;          // row (b, t, h) at q_rope + b*qr_stride_b + t*qr_stride_t + h*qr_stride_h
  const void* kv_rope;         // token (page, slot) at kv_rope + page*kvr_stride_page + slot*kvr_stride_tok
  const int* q_lens;           // optional [batch] actual query lengths (rows t >= it see nothing); null: q_len
  long long qr_stride_b, qr_stride_t, qr_stride_h;
  long long kvr_stride_page, kvr_stride_tok;
  long long lse_stride_b, lse_stride_t, lse_stride_h;  // lse at b, t (query token), h: FIA's (B, N, Q_S, 1)
  int kv_len;                  // seq_lens null: every batch's KV length
  int combine_rows;            // split_pass 2: rows a combine CTA merges (1, 2, 4 or 8; mla_combine_rows)
  // kFeatFlat: a request costs flat_overhead + max(tiles, 1) units, parts (gridDim.y) take
  // equal shares of the sum; the partials of request b's pieces sit at slots b + part.
  int flat_overhead;
};

// kFeatSplitRope (FIA): keys j < fia_mla_row_limit(...) are visible to query token t of a
// request with kv_len keys and q_len actual queries: FIA's sparse_mode 3, j <= t + kv_len -
// q_len (at Q_S = 1 with sparse 0 every key: t = 0, q_len = 1); a token past q_len sees none.
ATTNJIT_HOST_DEVICE inline int fia_mla_row_limit(int kv_len, int q_len, int t) {
  return t < q_len ? kv_len - q_len + t + 1 : 0;
}
// The largest row limit of a CTA's rows [row0, row0 + rows) (token-major: row r is token
// r / num_heads), rows_per_group = Q_S * num_heads: the CTA loads no key at or past it.
ATTNJIT_HOST_DEVICE inline int fia_mla_cta_limit(int kv_len, int q_len, int row0, int rows, int rows_per_group,
                                                 int num_heads) {
  const int first_t = row0 / num_heads;
  if (first_t >= q_len) return 0;
  const int last_row = (row0 + rows < rows_per_group ? row0 + rows : rows_per_group) - 1;
  const int last_t = last_row / num_heads < q_len - 1 ? last_row / num_heads : q_len - 1;
  return fia_mla_row_limit(kv_len, q_len, last_t);
}

// A dense request's keys: its seq_len, bounded by what its block-table row addresses.
ATTNJIT_HOST_DEVICE inline int mla_dense_range(const MlaParams& p, int seq_len, int page_size) {
  const long long cap = (long long)p.pages_per_seq * page_size;
  return seq_len < 0 ? 0 : (seq_len < cap ? seq_len : (int)cap);
}

// A split's end: its share of the plan (made over max_seq_len), and for the last split
// all that remains, so a seq_len above max_seq_len (outside the seed's contract) still
// attends every key instead of silently losing the newest. The same end otherwise.
ATTNJIT_HOST_DEVICE inline int mla_split_hi(const MlaParams& p, int range, int lo, int split) {
  if (split == p.num_splits - 1) return range;
  return range < lo + p.tokens_per_split ? range : lo + p.tokens_per_split;
}

// The flat schedule (kFeatFlat), shared by the kernel and the host's tests. Units: kernel
// tiles. `total` units in `parts` parts, the first `rem` of them one unit longer; part i
// covers [bound(i), bound(i + 1)). No division past make(): a 64-bit one in the pieces' code
// cost the wgmma loops the uniform datapath (+15% instructions, SASS).
struct MlaFlatSplit {
  long long per;
  int parts, rem;
  float inv_long, inv_short;  // 1 / (per + 1), 1 / per: part_of's estimates
  ATTNJIT_HOST_DEVICE static MlaFlatSplit make(long long total, int parts) {
    MlaFlatSplit f;
    f.parts = parts;
    f.per = total / parts;
    f.rem = (int)(total - f.per * parts);
    f.inv_long = 1.f / (float)(f.per + 1);
    f.inv_short = f.per > 0 ? 1.f / (float)f.per : 0.f;
    return f;
  }
  ATTNJIT_HOST_DEVICE long long bound(int i) const { return i * per + (i < rem ? i : rem); }
  // The part that holds unit x (< total): an estimate in the long parts or the short ones,
  // off by at most one (float's 24 bits against a quotient <= parts <= 65535), then two
  // steps each way.
  ATTNJIT_HOST_DEVICE int part_of(long long x) const {
    const long long longs = rem * (per + 1);
    int i = x < longs ? (int)((float)x * inv_long) : rem + (int)((float)(x - longs) * inv_short);
    i = i < 0 ? 0 : i > parts - 1 ? parts - 1 : i;
#ifdef __CUDACC__  // (the host compilers that include this header warn on the pragma)
#pragma unroll
#endif
    for (int k = 0; k < 2; ++k) {
      if (i + 1 < parts && bound(i + 1) <= x) ++i;
      if (i > 0 && bound(i) > x) --i;
    }
    return i;
  }
  // The piece of a request (its tiles at units [first, first + tiles)) that part i holds:
  // tiles [*lo, *hi) of it, empty when *hi <= *lo.
  ATTNJIT_HOST_DEVICE void piece(long long first, int tiles, int i, int* lo, int* hi) const {
    const long long a = bound(i) - first, z = bound(i + 1) - first;
    *lo = (int)(a < 0 ? 0 : a > tiles ? tiles : a);
    *hi = (int)(z < 0 ? 0 : z > tiles ? tiles : z);
  }
};
// A request's units: its overhead, then its tiles (at least one, so that a request with no
// key still has a part that writes its rows).
ATTNJIT_HOST_DEVICE inline int mla_flat_units(int tiles, int overhead) { return overhead + (tiles > 0 ? tiles : 1); }

// A split-combine CTA (split_pass 2): one row, 128 threads a lane group. Two groups (each
// thread half the splits) only where the combine's `ctas` fit on the `sms` at once and the
// entry has 256 threads: with more CTAs than SMs, two 128-thread CTAs an SM keep more rows'
// loads in flight than one of 256 (the wide tile's 255 registers allow 256 threads an SM).
ATTNJIT_HOST_DEVICE inline int mla_combine_threads(int entry_threads, long long ctas, int sms) {
  const int row_threads = mla_const::kHeadDimVo / 4;
  return entry_threads >= 2 * row_threads && ctas <= sms ? 2 * row_threads : row_threads;
}
// Its dynamic shared memory: the split weights, the warps' (rows') maxima and sums, and the
// lane groups past the first one's float4 sums of each of its `rows` (combine_rows).
ATTNJIT_HOST_DEVICE inline int mla_combine_smem_bytes(int threads, int rows = 1) {
  const int row_threads = mla_const::kHeadDimVo / 4, lanes = threads / row_threads > 0 ? threads / row_threads : 1;
  const int one = mla_const::kMaxSplits * 4 + 2 * (threads / 32) * 4 + (lanes - 1) * row_threads * 16;
  const int many = (8 * 32 + 16) * 4 + (lanes - 1) * rows * row_threads * 16;
  return rows > 1 && many > one ? many : one;
}
// The float4 loads a combine thread holds (MlaEpilogue::combine<kBatch>): 32 in the wide
// wgmma tile's 256-thread entry, 16 in the others (the narrow tile's, the mma.sync kernel's).
ATTNJIT_HOST_DEVICE inline int mla_combine_batch(int entry_threads) { return entry_threads == 256 ? 32 : 16; }
// Rows a combine CTA merges: one, or with few splits as many (2, 4, 8) as one lane group's
// loads hold, every row's splits in one round (rows x splits <= batch: at most 16 splits).
ATTNJIT_HOST_DEVICE inline int mla_combine_rows(int splits, int batch) {
  int r = 1;
  while (r < 8 && 2 * r * splits <= batch) r *= 2;
  return r;
}

// Workspace floats per (batch, row block, split): rows x 512 partial O, then the rows'
// maxima and sums (rows: 16 for the mma.sync kernel, mla_const::kHopperRows for wgmma).
ATTNJIT_HOST_DEVICE inline int mla_partial_floats(int rows = mla_const::kRowsPerCta) {
  return rows * (mla_const::kHeadDimVo + 2);
}

}  // namespace attnjit
