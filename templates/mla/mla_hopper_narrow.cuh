// The Hopper MLA kernel's narrow tile (trtllm-gen backend, sm_90a): CTAs of at most N = 16
// query rows (16 heads and one query token: the memory-bound case), or N = 32 with 16-bit KV
// (16 heads and two query tokens, 32 heads and one). The wide tile (mla_hopper.cuh) puts the
// rows in wgmma's M, which is 64, so at 16 rows three quarters of its tensor work is padding
// and a tile costs what it costs at 128 heads. Here the tokens sit in M and the rows in N:
//   S^T (64 tokens x N rows) = K (64 x 576) . Q^T: both operands K-major in shared memory;
//   O^T (512 x N) += V^T (512 x 64) . P^T: V^T read MN-major from the same tile, P^T
//   stored from registers by stmatrix.trans.
// Two math warpgroups take alternate tiles (0 the even ones, 1 the odd), each with its own
// running max, row sums and O^T; they meet only at the end, where their halves merge.
// The softmax runs down the columns: a row's max over a tile's 64 tokens is reduced over
// the warp by shuffles and over the warpgroup's four warps through shared memory.
// This file holds what both dtypes share: the fragment maps, the softmax, P^T, the rescale
// and the merge. The KV streams through a producer warpgroup's ring of blocks
// (mla_hopper_narrow_ring.cuh); fp8 KV is widened in registers (mla_hopper_narrow_fp8.cuh).
#pragma once

#include "common/hopper.cuh"
#include "common/wgmma.cuh"
#include "mla/mla_epilogue.cuh"
#include "mla/mla_hopper_io.cuh"

namespace attnjit {

template <class Tr, bool kTma>
struct MlaHopperNarrow : MlaHopperIo<Tr, kTma> {
  using Io = MlaHopperIo<Tr, kTma>;
  using typename Io::T;
  using typename Io::QT;
  using typename Io::Work;
  using Io::DV;
  using Io::kTile;
  static constexpr int kMathThreads = 256;  // the two math warpgroups
  static constexpr int kN = Tr::kRows;  // query rows: wgmma's N, 16 or 32
  static constexpr int kVals = kN / 2;  // a thread's values of an m64nN fragment
  static constexpr int kCols = kN / 4;  // the query rows (columns) it holds
  using Out = MlaEpilogue<Tr, kN>;
  enum : int { kColBar = 7 };               // + warpgroup: among the warpgroup's four warps
  static constexpr int kPBytes = kN * 128;  // a warpgroup's P^T: N rows x 64 tokens, swizzled
  static constexpr int kOStride = DV + 4;   // floats a row of the merged O (padded: no bank conflicts)
  static_assert((kN == 16 || kN == 32) && kTile == 64, "the fragment maps below are m64n16's and m64n32's");

  // Value i of a thread's m64nN fragment (S^T or a 64-dim block of O^T) sits in column
  // (query row) 8 (i / 4) + 2 (lane % 4) + i % 2, so a thread holds N / 4 columns: ci(i).
  __device__ static constexpr int ci(int i) { return 2 * (i / 4) + i % 2; }
  __device__ static int col(int c, int lane) { return 8 * (c / 2) + 2 * (lane & 3) + c % 2; }
  // ... and in fragment row warp * 16 + lane / 4 + 8 ((i % 4) / 2) (a token of S^T, a dim of O^T).
  __device__ static int frag_row(int i, int warp, int lane) { return warp * 16 + (lane >> 2) + 8 * ((i % 4) / 2); }

  // Masks and scales S^T of tile it, then the online softmax per
  // column: m moves to the new max, l (this thread's tokens' share) is rescaled and gains
  // the tile's, s becomes P, alpha is the columns' rescale factor for what came before.
  // key (sparse): whether the thread's two fragment rows, frag_row(0) and frag_row(2), hold a
  // key; x: the warpgroup's [4 warps][N] maxima exchange in shared memory.
  __device__ static void softmax(float (&s)[kVals], const bool (&key)[2], int it, const int (&limit)[kCols],
                                 int lim_min, float scale_log2, float (&m)[kCols], float (&l)[kCols], float (&alpha)[kCols],
                                 float* x, int wg, int warp, int lane) {
    const int j0 = it * kTile;
    float mx[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) mx[c] = kNegInf;
    // A tile whose every key the thread's columns see: the max on the raw scores (a
    // positive scale keeps it the max), the scale folded into the exponent's multiply-add.
    const bool interior = !Tr::kSparse && scale_log2 > 0.f && j0 + kTile <= lim_min;
    if (interior) {
#pragma unroll
      for (int i = 0; i < kVals; ++i) mx[ci(i)] = fmaxf(mx[ci(i)], s[i]);
#pragma unroll
      for (int c = 0; c < kCols; ++c) mx[c] *= scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < kVals; ++i) {
        const int row = frag_row(i, warp, lane);
        bool vis = j0 + row < limit[ci(i)];
        if constexpr (Tr::kSparse) vis = vis && key[(i % 4) / 2];
        s[i] = vis ? s[i] * scale_log2 : kNegInf;
        mx[ci(i)] = fmaxf(mx[ci(i)], s[i]);
      }
    }
    // The warp's 16 tokens (its lanes of one lane % 4), then the warpgroup's four warps.
#pragma unroll
    for (int c = 0; c < kCols; ++c)
#pragma unroll
      for (int off = 4; off < 32; off *= 2) mx[c] = fmaxf(mx[c], __shfl_xor_sync(0xffffffffu, mx[c], off));
    // [warp][column]: written again only after the P^T barrier, which every warp passes after reading it.
    if (lane < 4)
#pragma unroll
      for (int c = 0; c < kCols; ++c) x[warp * kN + col(c, lane)] = mx[c];
    named_barrier_sync(kColBar + wg, 128);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int n = col(c, lane);
      mx[c] = fmaxf(fmaxf(x[n], x[kN + n]), fmaxf(x[2 * kN + n], x[3 * kN + n]));
      alpha[c] = online_max_step(m[c], l[c], mx[c]);
    }
    const float mul = interior ? scale_log2 : 1.f;
#pragma unroll
    for (int i = 0; i < kVals; ++i) {
      s[i] = fast_exp2(fmaf(s[i], mul, -mx[ci(i)]));
      l[ci(i)] += s[i];
    }
  }

  // P^T (N rows x 64 tokens, K-major for the P V wgmma's B) from the warp's 16 tokens of
  // S^T: a stmatrix.trans per 16 rows (values 8h..8h + 7 hold columns 16h..16h + 15), whose
  // four matrices are (tokens 0-7 / 8-15) x (columns 0-7 / 8-15 of those 16).
  __device__ static void store_pt(u32 pt, const float (&s)[kVals], int warp, int lane) {
    const int j = lane / 8, row = (j / 2) * 8 + lane % 8, tok = warp * 16 + (j % 2) * 8;
#pragma unroll
    for (int h = 0; h < kN / 16; ++h)
      stmatrix_x4_trans(pt + swizzled_offset<kN>(16 * h + row, tok), pack2<T>(s[8 * h], s[8 * h + 1]),
                        pack2<T>(s[8 * h + 2], s[8 * h + 3]), pack2<T>(s[8 * h + 4], s[8 * h + 5]),
                        pack2<T>(s[8 * h + 6], s[8 * h + 7]));
  }

  __device__ static void rescale(float (&o)[8][kVals], const float (&a)[kCols]) {
    // Once the maxima settle, the factors are 1 across the warp: skip it.
    bool ones = true;
#pragma unroll
    for (int c = 0; c < kCols; ++c) ones = ones && a[c] == 1.f;
    if (__all_sync(0xffffffffu, ones)) return;
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int i = 0; i < kVals; ++i) o[mb][i] *= a[ci(i)];
  }

  // Range offset limits of the thread's four columns: query token t of the request sees
  // positions < seq_len - q_len + t + 1 (dense: and no key past the block table).
  __device__ static void column_limits(const MlaParams& p, const Work& w, int lane, int (&limit)[kCols], int& lim_min) {
    lim_min = 0x7fffffff;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int t = (w.group * p.rows_per_group + w.rb * kN + col(c, lane)) / p.num_heads;
      limit[c] = (Tr::kSparse ? w.hi : min(min(w.hi, w.seq_len - p.q_len + t + 1), p.pages_per_seq * Tr::kPageSize)) -
                 w.lo;
      lim_min = min(lim_min, limit[c]);
    }
  }
  __device__ static float scale_log2(const MlaParams& p) {
    return (p.bmm1_scale_ptr ? *p.bmm1_scale_ptr : p.bmm1_scale) * kLog2e;
  }
  __device__ static void clear(float (&o)[8][kVals], float (&m)[kCols], float (&l)[kCols]) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      m[c] = kNegInf;
      l[c] = 0.f;
    }
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int i = 0; i < kVals; ++i) o[mb][i] = 0.f;
  }

  // The two warpgroups' halves merged (each rescaled to the columns' common max) through
  // shared memory, then written row by row: the output, or this split's partial.
  // kDimPairs: O^T's fragment rows g and g + 8 of a warp's 16 are dims 2g and 2g + 1 (the fp8
  // path's V^T fragments, mla_hopper_narrow_fp8.cuh), not g and g + 8.
  // The two math warpgroups are threads 0-255. st: 12 N floats of statistics; ob: the
  // warpgroups' merged O ([N][kOStride] floats each, ob_stride bytes apart), both free once the
  // loops are done; sync: a barrier of those 256 threads.
  template <bool kDimPairs = false, class Sync>
  __device__ static void finish(const MlaParams& p, const Work& w, float* st, unsigned char* ob, int ob_stride,
                                unsigned* flag, Sync sync, int wg, int warp, int lane, const float (&o)[8][kVals],
                                const float (&m)[kCols], float (&l)[kCols]) {
#pragma unroll
    for (int c = 0; c < kCols; ++c)
#pragma unroll
      for (int off = 4; off < 32; off *= 2) l[c] += __shfl_xor_sync(0xffffffffu, l[c], off);
    sync();  // both loops are done: the buffers and the exchange slots are free
    // st: [2][N] maxima, [2][4][N] warp sums, then the rows' totals: [N] m, [N] l
    constexpr int kSums = 2 * kN, kTotM = 10 * kN, kTotL = 11 * kN;
    if (lane < 4)
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        st[kSums + wg * 4 * kN + warp * kN + col(c, lane)] = l[c];
        if (warp == 0) st[wg * kN + col(c, lane)] = m[c];
      }
    sync();
    float f[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int n = col(c, lane);
      const float m_tot = fmaxf(st[n], st[kN + n]);
      float l_tot = 0.f;
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        const float* ls = st + kSums + g * 4 * kN + n;
        l_tot += merge_weight(st[g * kN + n], m_tot) * (ls[0] + ls[kN] + ls[2 * kN] + ls[3 * kN]);
      }
      f[c] = merge_weight(m[c], m_tot);
      if (wg == 0 && warp == 0 && lane < 4) {
        st[kTotM + n] = m_tot;
        st[kTotL + n] = l_tot;
      }
    }
    float* of = reinterpret_cast<float*>(ob + wg * ob_stride);  // this warpgroup's O, [N][kOStride]
#pragma unroll
    for (int mb = 0; mb < 8; ++mb)
#pragma unroll
      for (int i = 0; i < kVals; ++i)
        of[col(ci(i), lane) * kOStride + mb * 64 +
           (kDimPairs ? warp * 16 + 2 * (lane >> 2) + (i % 4) / 2 : frag_row(i, warp, lane))] = o[mb][i] * f[ci(i)];
    sync();
    // 16 threads a row, each 8 dims of each 128-dim run; N / 16 rows a thread.
    const int sub = threadIdx.x % 16;
    float* part = nullptr;
    const long long cta = (long long)w.b * gridDim.y + blockIdx.y;
    if (p.num_splits > 1) part = Out::partial(p, cta, w.split);
#pragma unroll
    for (int row = threadIdx.x / 16; row < kN; row += 16) {
      const float* o0 = reinterpret_cast<const float*>(ob) + row * kOStride;
      const float* o1 = o0 + ob_stride / 4;
      const float m_row = st[kTotM + row], l_row = st[kTotL + row];
#pragma unroll
      for (int run = 0; run < DV / 128; ++run) {
        const int d0 = run * 128 + sub * 8;
        float acc[8];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float4 a = *reinterpret_cast<const float4*>(o0 + d0 + 4 * h);
          const float4 b = *reinterpret_cast<const float4*>(o1 + d0 + 4 * h);
          acc[4 * h] = a.x + b.x;
          acc[4 * h + 1] = a.y + b.y;
          acc[4 * h + 2] = a.z + b.z;
          acc[4 * h + 3] = a.w + b.w;
        }
        if (part) {
          float4* dst = reinterpret_cast<float4*>(part + row * DV + d0);
          dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
          dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
        } else {
          Out::template finish_row<8, 4, 8>(p, w.b, w.group, w.rb * kN + row, d0, m_row, l_row, acc,
                                            run == 0 && sub == 0);
        }
      }
      if (part && sub == 0) {
        part[kN * DV + row] = m_row;
        part[kN * DV + kN + row] = l_row;
      }
    }
    if (!part || p.split_pass == 1) return;  // one split, or a combine launch merges them
    // Every math thread is here (one call site); 256 / N threads a row merge.
    if (Out::last_to_arrive(p, cta, flag, threadIdx.x, sync))
      Out::template merge<kMathThreads / kN>(p, w.b, w.group, w.rb, cta, threadIdx.x);
  }
};

}  // namespace attnjit
