// The decode kernel's compile-time configuration: dtypes, tile, ring, stage layout and
// occupancy, derived from the rendered template arguments (decode_generator.cpp
// mirrors the figures the host needs, and the TU static_asserts them).
#pragma once

#include "common/dtype.cuh"
#include "decode/decode_params.cuh"

namespace attnjit {

template <class QT_, class KVT_, class OT_, int kHeadDim_, int kGroup_, int kPageSize_, bool kHnd_,
          int kMask_, int kPos_, unsigned kFeatures_, int kWarps_, int kStages_, int kSmemLimit_,
          int kTileTokens_ = 16, bool kLazyRescale_ = false, int kSplitMStages_ = 0, bool kDualM_ = false>
struct DecodeTraits {
  using QT = QT_;
  using KVT = KVT_;
  using OT = OT_;
  static constexpr bool kFp8Kv = IsFp8<KVT>::value;  // 8-bit K/V widened to fp16: fp8 or int8
  static constexpr bool kInt8Kv = IsSame<KVT, i8_t>::value;  // FIA antiquant: channel scales outside the MMA
  // int4 K/V (FIA antiquant, eight dims per KVT word): widened in registers from ldmatrix
  // like direct fp8, with its own dim permutations (q_col, DecodeTile, store_warp_o).
  static constexpr bool kInt4Kv = IsSame<KVT, i4x8_t>::value;
  static constexpr bool kQuantKv = kInt8Kv || kInt4Kv;  // antiquant scales outside the MMA
  // int8 K / V with per-token scales (DecodeParams::tok_*): each stage also holds its
  // tile's K scales, K offsets, V scales and V offsets (fp32, kTile each).
  static constexpr bool kKTok = (kFeatures_ & feat::kKTokScale) != 0;
  static constexpr bool kVTok = (kFeatures_ & feat::kVTokScale) != 0;
  static constexpr bool kTokScales = kKTok || kVTok;
  // kvpair with scales that differ by head (tokhead): a stage holds both heads' blocks.
  static constexpr int kTokHeads = (kFeatures_ & feat::kTokHead) ? 2 : 1;
  // fp8 KV is widened to fp16 (exact); 16-bit KV feeds the MMA as stored.
  using MT = typename Select<kFp8Kv || kInt4Kv, half_t, KVT>::type;
  static constexpr int kHeadDim = kHeadDim_, kGroup = kGroup_, kPageSize = kPageSize_;
  static constexpr bool kPaged = kPageSize_ > 0, kHnd = kHnd_;
  static constexpr int kMask = kMask_, kPos = kPos_;
  static constexpr unsigned kFeatures = kFeatures_;
  static constexpr int kWarps = kWarps_, kStages = kStages_, kThreads = kWarps_ * 32;
  static constexpr int kTile = kTileTokens_;  // tokens per warp tile (a page never splits one)
  // Past head_dim 256 one warp cannot hold O for every dim: the warps split the
  // output dims instead of the tokens, over one CTA-wide ring (decode_split_d.cuh).
  static constexpr bool kSplitD = kHeadDim_ > 256;
  static constexpr int kMergeWarps = kSplitD ? 1 : kWarps_;  // partial O rows the warp merge reads
  static constexpr bool kLazyRescale = kLazyRescale_;  // skip O *= alpha when no row max moved
  static_assert(kTile == 16 || kTile == 32, "warp tiles are 16 or 32 tokens");
  static constexpr int kRows = 16;  // query rows per CTA (one MMA M tile)
  static constexpr int kRowElems = kHeadDim + 8;             // padded MT row: no ldmatrix conflicts
  // fp8 rows of 128 bytes or more, and int4 rows of 32, 64 or 128·n bytes, are XOR-swizzled
  // by 16-byte chunk (conflict-free ldmatrix without padding: three 32-token fp8 stages of
  // two CTAs fit an SM, and int4's ring sheds the fifth of its bytes that padding took);
  // other rows are padded by 16 bytes.
  // kKvPair (int4 on the transposed tile, group <= 4): a CTA serves two adjacent KV heads,
  // their 2 x group query rows in the MMA's 8 columns, so a stage row holds both heads'
  // K (or V) rows side by side: with BSND's heads adjacent, one copy reads a whole
  // 128-byte line at hd128 instead of half of one (decode_transposed.cuh).
  static constexpr int kKvPack = (kFeatures_ & feat::kKvPair) ? 2 : 1;
  static constexpr int kCtaGroup = kGroup_ * kKvPack;  // query rows a CTA holds per query token
  // A CTA's row gr (of its q_len x kCtaGroup) with first KV head kvh: its query token, query
  // head and KV head (with kvpair the second group's rows are KV head kvh + 1's).
  __device__ static constexpr int row_token(int gr) { return gr / kCtaGroup; }
  __device__ static constexpr int row_q_head(int kvh, int gr) { return kvh * kGroup_ + gr % kCtaGroup; }
  __device__ static constexpr int row_kv_head(int kvh, int gr) { return kvh + gr % kCtaGroup / kGroup_; }
  static constexpr int kRowDataBytes = (kInt4Kv ? kHeadDim / 2 : kHeadDim * int(sizeof(KVT))) * kKvPack;  // a stage row
  static constexpr bool kSwizzleRaw =
      (kFp8Kv && kHeadDim % 128 == 0) ||
      (kInt4Kv && (kRowDataBytes == 32 || kRowDataBytes == 64 || kRowDataBytes % 128 == 0));
  static constexpr int kRawRowBytes = kRowDataBytes + (kSwizzleRaw ? 0 : 16);
  static constexpr int kQBytes = kRows * kRowElems * 2;
  static constexpr int kFreqBytes = kHeadDim * 2;            // kHeadDim/2 floats
  static constexpr int kTokBytes = kTokScales ? 4 * kTile * 4 * kTokHeads : 0;
  static constexpr int kStageBytes = 2 * kTile * kRawRowBytes + kTokBytes;  // K + V (+ per-token scales)
  static constexpr int kRingBytes = (kSplitD ? 1 : kWarps) * kStages * kStageBytes;
  // fp8 KV is widened in registers straight from ldmatrix (K dims permuted, V
  // dims interleaved). RoPE, which rewrites K in shared memory, and head dims
  // that are not a multiple of 32 (one ldmatrix reads 32 fp8 dims) widen first.
  static constexpr bool kDirectFp8 = kFp8Kv && kPos_ != pos_mode::kRope && kHeadDim_ % 32 == 0;
  // int4 and per-token scales (ALU-bound loops) read Q from shared memory: the registers
  // go to a fourth CTA per SM instead (H200, int4 B128 KV4K D128 g4: 12 warps per SM left
  // 41% of issue slots without an eligible warp; 280 -> 231 us with the cheaper widening).
  static constexpr bool kFourCtas = kInt4Kv || kTokScales;
  static constexpr bool kQInRegs = kHeadDim <= 128 && !kFourCtas;
  // int8 (read straight from ldmatrix) and int4 K/V at group <= 8 run the transposed tile
  // (decode_transposed.cuh): tokens in the MMA's M, the group's heads in N. These kernels
  // serve FIA's Q_S = 1 only (one query row per head: the host checks it), and they are
  // bound by instruction issue, where the row-major tile's 16 MMA rows are 8-15 padding.
  static constexpr bool kTransposed = kGroup_ <= 8 && ((kInt8Kv && kDirectFp8) || kInt4Kv) && !kSplitD &&
                                      kSplitMStages_ == 0;
  static constexpr int kConvBytes = (kFp8Kv && !kDirectFp8) ? (kSplitD ? 1 : kWarps) * 2 * kTile * kRowElems * 2 : 0;
  // Split-D: each warp scores its own dims; the warps' partial scores (kTile / 8 float4
  // a lane) meet in shared memory and every warp sums all of them in one order. Tiles
  // alternate two buffers: this one, and Q's bytes (Q is in registers by then).
  static constexpr int kScoreBytes = kSplitD ? kWarps * kTile * 64 : 0;
  static constexpr int kMaxSplits = 256;  // the host never asks for more
  static constexpr int kSplitWeightBytes = 2 * kRows * kMaxSplits * 4;  // split weights and sums
  static constexpr int kMergeBytes = kMergeWarps * kRows * (kHeadDim + 2) * 4;
  static constexpr int kLoopBytes = kRingBytes + kConvBytes + kScoreBytes;
  static constexpr int kTailBytes = kMergeBytes > kSplitWeightBytes ? kMergeBytes : kSplitWeightBytes;
  static constexpr int kTokenSplitBytes =
      kQBytes + kFreqBytes + (kLoopBytes > kTailBytes ? kLoopBytes : kTailBytes);
  // Split-M (spec decoding, more than 16 rows): a CTA holds kDecodeSplitMRows query
  // rows, 16 per warp, over one CTA-wide ring of kSplitMStages stages
  // (decode_split_m.cuh). The host picks it per launch (DecodeParams::rows_per_cta);
  // its layout [Q of 64 rows | freqs | ring | merge buffer of 64 rows] shares the
  // dynamic shared memory with the token-split layout.
  static constexpr int kSplitMStages = kSplitMStages_;
  static constexpr bool kSplitM = kSplitMStages_ > 0;
  static constexpr int kQBytesM = kDecodeSplitMRows * kRowElems * 2;
  static constexpr int kLoopBytesM = kSplitMStages * kStageBytes;
  static constexpr int kMergeBytesM = kDecodeSplitMRows * (kHeadDim + 2) * 4;
  static constexpr int kTailBytesM = kMergeBytesM > kSplitWeightBytes ? kMergeBytesM : kSplitWeightBytes;
  static constexpr int kSplitMBytes = kQBytesM + kFreqBytes + (kLoopBytesM > kTailBytesM ? kLoopBytesM : kTailBytesM);
  // Dual-M (spec decoding, 17-32 rows): each warp holds both 16-row M tiles of the CTA's
  // 32 rows and streams its own tiles as the token-split loop does, so each K/V
  // fragment it reads from shared memory feeds two MMAs (decode_dual_m.cuh). Its
  // layout: [Q of 32 rows | freqs | the token-split ring | a 32-row merge buffer].
  static constexpr bool kDualM = kDualM_;
  static constexpr int kQBytesD = kDecodeDualMRows * kRowElems * 2;
  static constexpr int kMergeBytesD = kWarps_ * kDecodeDualMRows * (kHeadDim + 2) * 4;
  static constexpr int kTailBytesD = kMergeBytesD > kSplitWeightBytes ? kMergeBytesD : kSplitWeightBytes;
  static constexpr int kDualMBytes = kQBytesD + kFreqBytes + (kLoopBytes > kTailBytesD ? kLoopBytes : kTailBytesD);
  static constexpr int kSmemBytesTM =
      kSplitM && kSplitMBytes > kTokenSplitBytes ? kSplitMBytes : kTokenSplitBytes;
  static constexpr int kSmemBytes = kDualM && kDualMBytes > kSmemBytesTM ? kDualMBytes : kSmemBytesTM;
  // CTAs per SM that shared memory allows, capped where the register cap that
  // __launch_bounds__ derives from it would force spills (estimate: O
  // accumulators + Q fragments + ~64 working registers per thread).
  // The transposed tile holds half the O accumulators (8 heads, not 16 rows).
  static constexpr int kRegEstimateTM = (kSplitD ? kHeadDim / kWarps_ : kHeadDim) / (kTransposed ? 4 : 2) +
                                        (kQInRegs ? kHeadDim / 4 : 0) + 64 + (kTile - 16);
  static constexpr int kRegEstimateD = kHeadDim + 64 + (kTile - 16);  // dual-M: O of 32 rows, Q read from shared memory
  static constexpr int kRegEstimate = kDualM && kRegEstimateD > kRegEstimateTM ? kRegEstimateD : kRegEstimateTM;
  static constexpr int kBlocksByRegs = 65536 / (kThreads * kRegEstimate);
  static constexpr int kBlocksBySmem = (kSmemLimit_ + 1024) / (kSmemBytes + 1024);  // an SM holds the block limit + 1 KB
  static constexpr int kMinBlocksRaw = kBlocksBySmem < kBlocksByRegs ? kBlocksBySmem : kBlocksByRegs;
  static constexpr int kMaxBlocks = kFourCtas ? (kTransposed && kInt4Kv ? 5 : 4) : 3;  // int4's fifth: decode_tiling
  static constexpr int kMinBlocks = kMinBlocksRaw < 1 ? 1 : (kMinBlocksRaw > kMaxBlocks ? kMaxBlocks : kMinBlocksRaw);
  static_assert(kThreads == 8 * kRows, "the split merge gives each row 8 threads");
  static_assert(kHeadDim % 16 == 0, "head_dim must be a multiple of 16");
  static_assert(!kPaged || kPageSize % kTile == 0, "page_size must be a multiple of the warp tile");
  static_assert(!kSplitD || (kHeadDim % (32 * kWarps) == 0 && kStages >= 2),
                "split-D: each warp's dims are whole 32-dim chunks, and the CTA ring prefetches");
  static_assert(!kTokScales || (kQuantKv && !kSplitD && !kSplitM),
                "per-token scales: int8/int4 K/V on the token-split loop");
  static_assert(kKvPack == 1 || (kInt4Kv && kTransposed && kCtaGroup <= 8),
                "kvpair: int4 K/V on the transposed tile, two groups in its 8 columns");
  static_assert(kTokHeads == 1 || (kKvPack == 2 && kTokScales), "tokhead: kvpair's per-token scales by head");
  static_assert(!kInt4Kv || (!kSplitD && !kSplitM && kPos_ == pos_mode::kNone && kHeadDim % 64 == 0),
                "int4 K/V: the token-split loop, no RoPE, head dims in 64s (one ldmatrix reads 32)");
  static_assert(!kSplitM || (!kSplitD && (!kFp8Kv || kDirectFp8) && kPos_ != pos_mode::kRope &&
                             kSplitMStages >= 2 && kWarps * kRows == kDecodeSplitMRows),
                "split-M: K/V read as stored (no RoPE, no widening), one 16-row tile per warp, "
                "and a ring that prefetches");
  static_assert(!kDualM || (kSplitM && kHeadDim <= 128 && !kQuantKv && kKvPack == 1),
                "dual-M: spec-decode kernels (beside split-M) whose warps hold O for 32 rows");
};

}  // namespace attnjit
