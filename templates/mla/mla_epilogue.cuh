// The MLA decode kernels' shared ending: a finished row scaled and written (sinks,
// bmm2, LSE), and split-KV partials merged by the last CTA of a row block. Both
// kernels (mma.sync 16-row, wgmma 64-row) use it with their own row count.
#pragma once

#include "common/dtype.cuh"
#include "common/mma.cuh"
#include "common/softmax.cuh"
#include "mla/mla_params.cuh"

namespace attnjit {

// kRows: query rows per CTA. Partials per (CTA, split): kRows x 512 O (unnormalised,
// relative to the row's max), then kRows maxima, then kRows sums (mla_partial_floats).
template <class Tr, int kRows>
struct MlaEpilogue {
  using OT = typename Tr::OT;
  static constexpr int DV = mla_const::kHeadDimVo;
  static constexpr int kPartialFloats = kRows * (DV + 2);
  __device__ static constexpr bool has(unsigned f) { return (Tr::kFeatures & f) != 0; }

  // Row `row` (of the group's rows_per_group) of request b, finished: its output scale, bmm2 over
  // the sum of weights (sinks included), and from `lse_writer` its LSE. m_tot and l_tot are the
  // row's max and sum over the keys (the accumulators are relative to m_tot).
  __device__ static float row_scale(const MlaParams& p, int b, int group, int row, float m_tot, float l_tot,
                                    bool lse_writer) {
    const int f = group * p.rows_per_group + row;
    const int t = f / p.num_heads, h = f % p.num_heads;
    // A sink rescales to the larger max (no overflow); c folds into the scale.
    float c = 1.f;
    if (has(mla_const::kFeatSinks) && p.sinks) {
      const float sink = p.sinks[h] * kLog2e;
      if (m_tot == kNegInf) {
        m_tot = sink;
        l_tot = 1.f;
      } else {
        const float mx = fmaxf(m_tot, sink);
        c = fast_exp2(m_tot - mx);
        l_tot = l_tot * c + fast_exp2(sink - mx);
        m_tot = mx;
      }
    }
    if (has(mla_const::kFeatLse) && lse_writer && p.lse && row < p.rows_per_group) {
      float lse2 = l_tot > 0.f ? m_tot + __log2f(l_tot) : kNegInf;
      if constexpr (Tr::kSplitRope) {
        // FIA: natural log, +inf for a row that sees no key (or lies past its length).
        p.lse[b * p.lse_stride_b + t * p.lse_stride_t + h * p.lse_stride_h] =
            l_tot > 0.f ? lse2 * 0.6931471805599453f : __int_as_float(0x7f800000);
      } else {
        p.lse[((long long)b * p.q_len + t) * p.num_heads + h] = p.lse_base2 ? lse2 : lse2 * 0.6931471805599453f;
      }
    }
    const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
    return l_tot > 0.f ? bmm2 * c / l_tot : 0.f;
  }

  // Row `row`'s first element in out (row < rows_per_group).
  __device__ static OT* out_row(const MlaParams& p, int b, int group, int row) {
    const int f = group * p.rows_per_group + row;
    return static_cast<OT*>(p.out) + b * p.o_stride_b + (f / p.num_heads) * p.o_stride_t + (f % p.num_heads) * p.o_stride_h;
  }

  // Whether every row of out starts 16-byte aligned (then rows may leave as 16-byte chunks).
  __device__ static bool rows_aligned16(const MlaParams& p) {
    constexpr long long kElems = 16 / int(sizeof(OT));
    return (reinterpret_cast<unsigned long long>(p.out) % 16 == 0) &&
           ((p.o_stride_b | p.o_stride_t | p.o_stride_h) % kElems == 0);
  }

  // Writes row `row` (of the group's rows_per_group) of request b: pair k < N/2
  // (acc[2k], acc[2k+1]) at dims d0 + (k / kPairsPerRun) * kRunStride + (k % kPairsPerRun) * 2
  // + {0, 1}, scaled by row_scale, and its LSE when `lse_writer`. A pair leaves as one 4-byte
  // store (d0 is even, and both ops require out's base and strides to be 4-byte multiples).
  template <int N, int kPairsPerRun, int kRunStride>
  __device__ static void finish_row(const MlaParams& p, int b, int group, int row, int d0, float m_tot, float l_tot,
                                    const float (&acc)[N], bool lse_writer) {
    if (row >= p.rows_per_group) return;
    const float scale = row_scale(p, b, group, row, m_tot, l_tot, lse_writer);
    static_assert(sizeof(OT) == 2, "16-bit output");
    OT* dst = out_row(p, b, group, row) + d0;
#pragma unroll
    for (int k = 0; k < N / 2; ++k)
      *reinterpret_cast<u32*>(dst + (k / kPairsPerRun) * kRunStride + (k % kPairsPerRun) * 2) =
          pack2<OT>(acc[2 * k] * scale, acc[2 * k + 1] * scale);
  }

  // This CTA's partial block; cta = the (batch, row block) index the semaphores count.
  __device__ static float* partial(const MlaParams& p, long long cta, int split) {
    return p.workspace + (cta * p.num_splits + split) * kPartialFloats;
  }

  // After every thread wrote its part of the partial: true in the CTA that arrived last of
  // `pieces` (default: the splits), which then merges. `sync` is a barrier over the threads
  // that wrote (tid 0 among them). The semaphore resets itself for the next launch.
  template <class Sync>
  __device__ static bool last_to_arrive(const MlaParams& p, long long cta, unsigned* flag_s, int tid, Sync sync,
                                        int pieces = 0) {
    __threadfence();
    sync();
    if (tid == 0) {
      unsigned* sem = p.semaphores + cta;
      const unsigned prev = atomicAdd(sem, 1u);
      const bool last = prev == unsigned((pieces > 0 ? pieces : p.num_splits) - 1);
      if (last) *sem = 0u;  // self-resetting: the next launch finds zero
      *flag_s = last ? 1u : 0u;
    }
    sync();
    const bool last = *flag_s != 0u;
    if (last) __threadfence();
    return last;
  }

  // The combine pass (split_pass 2): one row of the attention pass's row block blockIdx.y
  // of request blockIdx.z per CTA (blockIdx.x: the row), so that a single long request still
  // spreads over the SMs. blockDim.x = 128 x kLanes: thread (d4, lane group q) owns a float4
  // of the 512 dims and the splits q, q + kLanes, ... Its first kBatch splits' O loads go
  // out with the rows' maxima and sums, before the weights are known: one round of loads
  // for the whole row when splits <= kLanes x kBatch (the entry's registers allow kBatch
  // float4s a thread; a split of weight 0, whose O may never have been written, is read
  // but never used). The lane groups' sums meet in shared memory.
  // smem (mla_combine_smem_bytes): [kMaxSplits] weights, [2][warps] maxima and sums,
  // [kLanes - 1][128] float4 partial sums.
  template <int kBatch>
  __device__ static void combine(const MlaParams& p, unsigned char* smem) {
    constexpr int kRowThreads = DV / 4, kMaxSplits = mla_const::kMaxSplits;
    pdl_wait_prior_grid();  // the attention pass's partials
    const int threads = blockDim.x, lanes = threads / kRowThreads, warps = threads / 32;
    const int d4 = threadIdx.x % kRowThreads, q = threadIdx.x / kRowThreads, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int lr = blockIdx.x, group = blockIdx.y / p.row_blocks, rb = blockIdx.y % p.row_blocks, b = blockIdx.z;
    const long long cta = (long long)b * gridDim.y + blockIdx.y;
    const int n = p.num_splits;
    const bool row_ok = lr < kRows && rb * kRows + lr < p.rows_per_group;  // the same for the whole CTA
    float* wt = reinterpret_cast<float*>(smem);
    float* red = wt + kMaxSplits;                                // [2][warps]
    float4* part = reinterpret_cast<float4*>(red + 2 * warps);  // [lanes - 1][128]
    const float* base = partial(p, cta, 0);
    const float* mrow = base + kRows * DV + lr;
    const float* src = base + lr * DV + 4 * d4;
    auto load_o = [&](int sp) {
      return row_ok && sp < n ? __ldcg(reinterpret_cast<const float4*>(src + (long long)sp * kPartialFloats))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
    };
    float4 x[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) x[i] = load_o(q + lanes * i);
    // Every split's max and sum: split t + threads * j of thread t; two a thread cover the
    // kMaxSplits at the fewest threads the host launches (128: mla_combine_threads).
    constexpr int kStatsPer = 2;
    static_assert(kStatsPer * kRowThreads >= kMaxSplits, "the stats loads cover every split");
    float ms[kStatsPer], ls[kStatsPer], mx = kNegInf;
#pragma unroll
    for (int j = 0; j < kStatsPer; ++j) {
      const int sp = threadIdx.x + threads * j;
      const bool in = row_ok && sp < n && sp < kMaxSplits;
      ms[j] = in ? __ldcg(mrow + (long long)sp * kPartialFloats) : kNegInf;
      ls[j] = in ? __ldcg(mrow + kRows + (long long)sp * kPartialFloats) : 0.f;
      mx = fmaxf(mx, ms[j]);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    float m_tot = red[0];
    for (int i = 1; i < warps; ++i) m_tot = fmaxf(m_tot, red[i]);
    float lsum = 0.f;
#pragma unroll
    for (int j = 0; j < kStatsPer; ++j) {
      const int sp = threadIdx.x + threads * j;
      const float e = merge_weight(ms[j], m_tot);  // 0 for an empty split or one past n
      if (sp < kMaxSplits) wt[sp] = e;
      if (e != 0.f) lsum += e * ls[j];
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
    if (lane == 0) red[warps + warp] = lsum;
    __syncthreads();  // (wt too)
    float l_tot = 0.f;
    for (int i = 0; i < warps; ++i) l_tot += red[warps + i];
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    auto add = [&](int sp, const float4& v) {
      const float e = sp < n ? wt[sp] : 0.f;
      if (e != 0.f) {
        acc[0] += e * v.x; acc[1] += e * v.y; acc[2] += e * v.z; acc[3] += e * v.w;
      }
    };
#pragma unroll
    for (int i = 0; i < kBatch; ++i) add(q + lanes * i, x[i]);
    // More splits than one round holds: the rest in rounds of kBatch, each issued whole.
    for (int sp0 = lanes * kBatch; sp0 < n; sp0 += lanes * kBatch) {
#pragma unroll
      for (int i = 0; i < kBatch; ++i) x[i] = load_o(sp0 + q + lanes * i);
#pragma unroll
      for (int i = 0; i < kBatch; ++i) add(sp0 + q + lanes * i, x[i]);
    }
    if (q > 0) part[(q - 1) * kRowThreads + d4] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();
    if (q > 0 || !row_ok) return;
    for (int g = 1; g < lanes; ++g) {
      const float4 v = part[(g - 1) * kRowThreads + d4];
      acc[0] += v.x; acc[1] += v.y; acc[2] += v.z; acc[3] += v.w;
    }
    finish_row<4, 2, 4>(p, b, group, rb * kRows + lr, 4 * d4, m_tot, l_tot, acc, d4 == 0);
  }

  // The combine pass with kR > 1 rows a CTA (p.combine_rows: few splits, so a CTA's life is
  // a few dependent latencies, loads, two reductions and the store, which rows now share;
  // the host guarantees num_splits <= kLanes x kBatch / kR <= 32). Thread (d4, lane group q)
  // issues the O loads of every row first, x[k]: row k / per, split q + kLanes (k % per);
  // warp w reduces the maxima and sums of rows w, w + warps, ... one split a lane; the
  // weights meet in shared memory, then each row's float4 column is summed and written.
  // smem (mla_combine_smem_bytes): [8][32] weights, [8][2] maxima and sums, [kLanes - 1][kR][128] float4s.
  template <int kBatch, int kR>
  __device__ static void combine_rows(const MlaParams& p, unsigned char* smem) {
    constexpr int kRowThreads = DV / 4, per = kBatch / kR;
    pdl_wait_prior_grid();  // the attention pass's partials
    const int threads = blockDim.x, lanes = threads / kRowThreads, warps = threads / 32;
    const int d4 = threadIdx.x % kRowThreads, q = threadIdx.x / kRowThreads, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int group = blockIdx.y / p.row_blocks, rb = blockIdx.y % p.row_blocks, b = blockIdx.z;
    const long long cta = (long long)b * gridDim.y + blockIdx.y;
    const int n = p.num_splits, lr0 = blockIdx.x * kR;
    const int rows = min(kRows, p.rows_per_group - rb * kRows);  // the row block's rows
    float* wt = reinterpret_cast<float*>(smem);
    float* tot = wt + 8 * 32;
    float4* part = reinterpret_cast<float4*>(tot + 16);
    const float* base = partial(p, cta, 0);
    float4 x[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int lr = lr0 + k / per, sp = q + lanes * (k % per);
      x[k] = lr < rows && sp < n
                 ? __ldcg(reinterpret_cast<const float4*>(base + (long long)sp * kPartialFloats + lr * DV + 4 * d4))
                 : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int r = warp; r < kR; r += warps) {
      const int lr = lr0 + r;
      const bool in = lr < rows && lane < n;
      const float* mrow = base + kRows * DV + lr + (long long)lane * kPartialFloats;
      const float ms = in ? __ldcg(mrow) : kNegInf, ls = in ? __ldcg(mrow + kRows) : 0.f;
      float mx = ms;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float e = merge_weight(ms, mx);  // 0 for an empty split or one past n
      float l = e != 0.f ? e * ls : 0.f;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xffffffffu, l, off);
      wt[r * 32 + lane] = e;
      if (lane == 0) {
        tot[2 * r] = mx;
        tot[2 * r + 1] = l;
      }
    }
    __syncthreads();
    float acc[kR][4];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.f;
#pragma unroll
      for (int i = 0; i < per; ++i) {
        const int sp = q + lanes * i;
        const float e = sp < n ? wt[r * 32 + sp] : 0.f;
        if (e != 0.f) {
          const float4& v = x[r * per + i];
          acc[r][0] += e * v.x; acc[r][1] += e * v.y; acc[r][2] += e * v.z; acc[r][3] += e * v.w;
        }
      }
      if (q > 0) part[((q - 1) * kR + r) * kRowThreads + d4] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
    if (lanes > 1) __syncthreads();
    if (q > 0) return;
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (lr0 + r >= rows) break;
      for (int g = 1; g < lanes; ++g) {
        const float4 v = part[((g - 1) * kR + r) * kRowThreads + d4];
        acc[r][0] += v.x; acc[r][1] += v.y; acc[r][2] += v.z; acc[r][3] += v.w;
      }
      finish_row<4, 2, 4>(p, b, group, rb * kRows + lr0 + r, 4 * d4, tot[2 * r], tot[2 * r + 1], acc[r], d4 == 0);
    }
  }
  // The combine pass: one row a CTA, or p.combine_rows.
  template <int kBatch>
  __device__ static void combine_any(const MlaParams& p, unsigned char* smem) {
    switch (p.combine_rows) {
      case 2: return combine_rows<kBatch, 2>(p, smem);
      case 4: return combine_rows<kBatch, 4>(p, smem);
      case 8: return combine_rows<kBatch, 8>(p, smem);
      default: return combine<kBatch>(p, smem);
    }
  }

  // The last CTA merges every split's partial: kSub threads per row (threads tid <
  // kRows * kSub), each 8 dims of every run of kSub * 8.
  template <int kSub>
  __device__ static void merge(const MlaParams& p, int b, int group, int rb, long long cta, int tid) {
    static_assert(DV % (kSub * 8) == 0, "runs tile the 512 dims");
    if (tid >= kRows * kSub) return;
    const int lr = tid / kSub, sub = tid % kSub;
    const float* base = partial(p, cta, 0);
    const float* mrow = base + kRows * DV + lr;
    float m_tot = kNegInf;
    for (int sp = 0; sp < p.num_splits; ++sp) m_tot = fmaxf(m_tot, __ldcg(mrow + sp * kPartialFloats));
    float l_tot = 0.f;
    for (int sp = 0; sp < p.num_splits; ++sp)
      l_tot += __ldcg(mrow + kRows + sp * kPartialFloats) * merge_weight(__ldcg(mrow + sp * kPartialFloats), m_tot);
    for (int run = 0; run < DV / (kSub * 8); ++run) {
      const int d0 = run * kSub * 8 + sub * 8;
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (int sp = 0; sp < p.num_splits; ++sp) {
        const float wgt = merge_weight(__ldcg(mrow + sp * kPartialFloats), m_tot);
        if (wgt == 0.f) continue;  // empty or fully masked split: its O was never written
        const float4* src = reinterpret_cast<const float4*>(base + sp * kPartialFloats + lr * DV + d0);
        const float4 x = __ldcg(src), y = __ldcg(src + 1);
        acc[0] += wgt * x.x; acc[1] += wgt * x.y; acc[2] += wgt * x.z; acc[3] += wgt * x.w;
        acc[4] += wgt * y.x; acc[5] += wgt * y.y; acc[6] += wgt * y.z; acc[7] += wgt * y.w;
      }
      finish_row<8, 4, 8>(p, b, group, rb * kRows + lr, d0, m_tot, l_tot, acc, run == 0 && sub == 0);
    }
  }
};

}  // namespace attnjit
