// The MLA decode kernel's traits and one warp's tensor-core work on a KV tile:
// Q into shared memory, S = Q.K^T over 576 dims, O += P.V over the warp's 128 V dims,
// for 16-bit KV read with ldmatrix and for fp8 KV widened in registers from ldmatrix.
#pragma once

#include "common/dtype.cuh"
#include "common/mma.cuh"
#include "mla/mla_params.cuh"

namespace attnjit {

template <class QT_, class KVT_, class OT_, int kPageSize_, bool kSparse_, unsigned kFeatures_, int kStages_>
struct MlaTraits {
  using QT = QT_;
  using KVT = KVT_;
  using OT = OT_;
  static constexpr bool kFp8Kv = IsFp8<KVT>::value;
  // fp8 KV is widened to fp16 (exact for e4m3) and the MMA runs in fp16, as in the GQA
  // decode kernel; a bf16 or fp8 query is rounded to fp16 once, at load.
  using MT = typename Select<kFp8Kv, half_t, QT>::type;
  static_assert(!IsFp8<QT>::value || kFp8Kv, "an fp8 query needs an fp8 KV cache");
  static_assert(!IsFp8<OT>::value, "the output is 16-bit");
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kSparse = kSparse_;
  static constexpr unsigned kFeatures = kFeatures_;
  static constexpr int kStages = kStages_;
  // FIA's MLA: Q and K each in a nope (512) and a rope (64) tensor (MlaParams' split fields).
  static constexpr bool kSplitRope = (kFeatures_ & mla_const::kFeatSplitRope) != 0;
  static_assert(!(kSplitRope && kSparse_), "FIA's MLA is dense (causal)");
  static constexpr int kWarps = mla_const::kWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRows = mla_const::kRowsPerCta;
  static constexpr int kTile = mla_const::kTileTokens;
  // Rows padded by 16 bytes to an odd number of 16-byte units (73 for a 16-bit row, 37
  // for an fp8 one), so the 8 rows of an ldmatrix fall in distinct banks.
  static constexpr int kQRowBytes = mla_const::kHeadDimQk * 2 + 16;
  static constexpr int kKvRowBytes = mla_const::kHeadDimQk * int(sizeof(KVT)) + 16;
  static constexpr int kQBytes = kRows * kQRowBytes;
  static constexpr int kStageBytes = kTile * kKvRowBytes;
  static constexpr int kSStride = kTile + 4;  // floats per row of the score tile
  static constexpr int kSBytes = kRows * kSStride * 4;
  static constexpr int kOkBytes = kStages * kTile * 4;
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes + kSBytes + kOkBytes + 16;
  static constexpr int kMinBlocks = 1;
  static_assert(kStages >= 2, "the ring prefetches");
};

template <class Tr>
struct MlaTile {
  using QT = typename Tr::QT;
  using KVT = typename Tr::KVT;
  using MT = typename Tr::MT;
  static constexpr int D = mla_const::kHeadDimQk, R = Tr::kRows;
  static constexpr int kDimsPerWarp = mla_const::kHeadDimVo / Tr::kWarps;  // 128
  static constexpr int kNBlocks = kDimsPerWarp / 8;                       // 16 n8 blocks of O per warp
  // Where a lane's O pairs sit (see o_pair): pair k at d0 + (k / kPairsPerRun) * kRunStride
  // + (k % kPairsPerRun) * 2, d0 = the warp's first dim + kLaneStride * (lane & 3).
  static constexpr int kPairsPerRun = Tr::kFp8Kv ? 2 : 1;
  static constexpr int kRunStride = Tr::kFp8Kv ? 16 : 8;
  static constexpr int kLaneStride = Tr::kFp8Kv ? 4 : 2;

  // Where dim d of a 16-dim group sits in Q's A operand. ldmatrix reads fp8 K as byte
  // pairs and hands lane quad t dims 4t..4t+3; the MMA expects k = 2t, 2t+1, 2t+8, 2t+9,
  // so Q takes that permutation (the GQA decode kernel's q_col). Pair pi of the group
  // (dims 2pi, 2pi+1) lands at pair pi/2 (pi even) or 4 + pi/2 (pi odd).
  __device__ static constexpr int q_pair(int pi) { return Tr::kFp8Kv ? (pi % 2 ? 4 + pi / 2 : pi / 2) : pi; }

  // Q rows row0.. into shared memory as MT (zero rows past rows_per_group).
  // 16-bit KV: cp.async as stored (the caller commits). fp8 KV: every load of a thread
  // is issued first, then each is widened and permuted (visible after a __syncthreads).
  __device__ static void load_q(const MlaParams& p, int b, int group, int row0, unsigned char* q_s, int tid) {
    constexpr int kChunks = D * int(sizeof(QT)) / 16;  // 16-byte chunks per Q row
    const unsigned char* q = static_cast<const unsigned char*>(p.q);
    auto src_of = [&](int c, bool* valid) {
      const int lr = row0 + c / kChunks;
      const int f = group * p.rows_per_group + lr;
      *valid = lr < p.rows_per_group;
      const int t = f / p.num_heads, h = f % p.num_heads;
      if constexpr (Tr::kSplitRope) {
        // Chunks of the first 512 dims from q, the rope dims' from q_rope.
        constexpr int kNopeBytes = mla_const::kNopeDims * int(sizeof(QT));
        const int at = (c % kChunks) * 16;
        if (!*valid) return q;
        if (at < kNopeBytes)
          return q + (b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h) * int(sizeof(QT)) + at;
        return static_cast<const unsigned char*>(p.q_rope) +
               (b * p.qr_stride_b + t * p.qr_stride_t + h * p.qr_stride_h) * int(sizeof(QT)) + (at - kNopeBytes);
      } else {
        return *valid ? q + (b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h) * int(sizeof(QT)) + (c % kChunks) * 16
                      : q;
      }
    };
    if constexpr (!Tr::kFp8Kv) {
      for (int c = tid; c < R * kChunks; c += Tr::kThreads) {
        bool valid;
        const unsigned char* src = src_of(c, &valid);
        cp_async_16(q_s + (c / kChunks) * Tr::kQRowBytes + (c % kChunks) * 16, src, valid ? 16u : 0u);
      }
    } else {
      constexpr int kPer = (R * kChunks + Tr::kThreads - 1) / Tr::kThreads;
      uint4 raw[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = tid + i * Tr::kThreads;
        bool valid = false;
        const unsigned char* src = c < R * kChunks ? src_of(c, &valid) : q;
        raw[i] = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int c = tid + i * Tr::kThreads;
        if (c >= R * kChunks) break;
        unsigned char* row = q_s + (c / kChunks) * Tr::kQRowBytes;
        const u32 w[4] = {raw[i].x, raw[i].y, raw[i].z, raw[i].w};
        if constexpr (IsFp8<QT>::value) {
          // 16 fp8 dims: one whole group of 16, eight pairs.
          u32* grp = reinterpret_cast<u32*>(row + (c % kChunks) * 32);
#pragma unroll
          for (int pi = 0; pi < 8; ++pi) grp[q_pair(pi)] = fp8x2_to_half2(QT{}, w[pi / 2] >> (16 * (pi % 2)));
        } else {
          // 8 16-bit dims: half of a group of 16, pairs 4 * (chunk % 2) + j.
          const int ch = c % kChunks;
          u32* grp = reinterpret_cast<u32*>(row + (ch / 2) * 32);
#pragma unroll
          for (int j = 0; j < 4; ++j)
            grp[q_pair(4 * (ch % 2) + j)] = pack2<half_t>(to_float(QT{u16(w[j] & 0xffffu)}), to_float(QT{u16(w[j] >> 16)}));
        }
      }
    }
  }

  // S (16 rows x this warp's 8 tokens) over 576 dims. kt: the tile; q_s: Q. Two
  // accumulators, even and odd k-steps, halve the chain of dependent MMAs.
  __device__ static void scores(const unsigned char* q_s, const unsigned char* kt, int warp, int lane, float (&s)[4]) {
    float s1[4] = {0.f, 0.f, 0.f, 0.f};
    s[0] = s[1] = s[2] = s[3] = 0.f;
    const unsigned char* k_row = kt + (warp * 8 + (lane & 7)) * Tr::kKvRowBytes + (lane >> 3) * 16;
    const unsigned char* q_row = q_s + ((lane & 7) + ((lane >> 3) & 1) * 8) * Tr::kQRowBytes + (lane >> 4) * 16;
    if constexpr (Tr::kFp8Kv) {
      // One ldmatrix: 8 tokens x 64 fp8 dims, four k-steps; lane quad t gets dims 4t..4t+3 of each 16.
#pragma unroll 3
      for (int c = 0; c < D / 64; ++c) {
        u32 kb[4];
        ldmatrix_x4(kb, k_row + c * 64);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          u32 qa[4];
          ldmatrix_x4(qa, q_row + (c * 4 + m) * 32);
          mma_16816<MT>(m % 2 ? s1 : s, qa, fp8x2_to_half2(KVT{}, kb[m] & 0xffffu), fp8x2_to_half2(KVT{}, kb[m] >> 16));
        }
      }
    } else {
      // Two k-steps per K ldmatrix.
#pragma unroll 6
      for (int kk = 0; kk < D / 16; kk += 2) {
        u32 kb[4], qa[4];
        ldmatrix_x4(kb, k_row + kk * 32);
        ldmatrix_x4(qa, q_row + kk * 32);
        mma_16816<MT>(s, qa, kb[0], kb[1]);
        ldmatrix_x4(qa, q_row + (kk + 1) * 32);
        mma_16816<MT>(s1, qa, kb[2], kb[3]);
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] += s1[e];
  }

  // O (16 rows x this warp's 128 dims) += P (16 x 32, A fragments per 16 tokens) . V, V
  // the tile's first 512 dims. fp8: ldmatrix.trans on byte pairs gives lane (g, t) tokens
  // 2t, 2t+1 of dims 2g and 2g+1; they split into an even-dim and an odd-dim n block, so
  // O's dims come out interleaved (o_pair puts them back).
  __device__ static void accumulate_pv(const u32 (&pa)[2][4], const unsigned char* kt, int warp, int lane,
                                       float (&o)[kNBlocks][4]) {
#pragma unroll
    for (int kk2 = 0; kk2 < 2; ++kk2) {
      const unsigned char* v_row = kt + (kk2 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * Tr::kKvRowBytes +
                                   (warp * kDimsPerWarp + (lane >> 4) * 8 * (Tr::kFp8Kv ? 2 : 1)) * int(sizeof(KVT));
      if constexpr (Tr::kFp8Kv) {
#pragma unroll
        for (int c = 0; c < kDimsPerWarp / 32; ++c) {
          u32 r[4];
          ldmatrix_x4_trans(r, v_row + c * 32);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int j = (c * 2 + h) * 2;
            const u32 lo = r[2 * h], hi = r[2 * h + 1];
            mma_16816<MT>(o[j], pa[kk2], fp8x2_to_half2(KVT{}, __byte_perm(lo, 0, 0x0020)),
                          fp8x2_to_half2(KVT{}, __byte_perm(hi, 0, 0x0020)));
            mma_16816<MT>(o[j + 1], pa[kk2], fp8x2_to_half2(KVT{}, __byte_perm(lo, 0, 0x0031)),
                          fp8x2_to_half2(KVT{}, __byte_perm(hi, 0, 0x0031)));
          }
        }
      } else {
#pragma unroll
        for (int nb = 0; nb < kNBlocks / 2; ++nb) {
          u32 vb[4];
          ldmatrix_x4_trans(vb, v_row + nb * 32);
          mma_16816<MT>(o[2 * nb], pa[kk2], vb[0], vb[1]);
          mma_16816<MT>(o[2 * nb + 1], pa[kk2], vb[2], vb[3]);
        }
      }
    }
  }

  // Pair k (0..15) of row half i (rows g, g + 8) of this lane's O: values (a, b) of dims
  // d, d + 1 relative to the warp's first dim.
  __device__ static void o_pair(const float (&o)[kNBlocks][4], int k, int i, int lane, float& a, float& b, int& d) {
    if constexpr (Tr::kFp8Kv) {
      // n blocks 2q (even dims) and 2q+1 (odd dims) of chunk q: dims 16q + 4t + {0, 1, 2, 3}.
      const int q = k / 2, h = k % 2;
      a = o[2 * q][2 * i + h];
      b = o[2 * q + 1][2 * i + h];
      d = 16 * q + 4 * (lane & 3) + 2 * h;
    } else {
      a = o[k][2 * i];
      b = o[k][2 * i + 1];
      d = 8 * k + 2 * (lane & 3);
    }
  }
};

}  // namespace attnjit
