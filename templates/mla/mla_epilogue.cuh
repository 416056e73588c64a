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

  // Writes row `row` (of the group's rows_per_group) of request b: pair k < N/2
  // (acc[2k], acc[2k+1]) at dims d0 + (k / kPairsPerRun) * kRunStride + (k % kPairsPerRun) * 2
  // + {0, 1}, scaled by bmm2 / (sum of weights, sinks included), and its LSE when `lse_writer`.
  template <int N, int kPairsPerRun, int kRunStride>
  __device__ static void finish_row(const MlaParams& p, int b, int group, int row, int d0, float m_tot, float l_tot,
                                    const float (&acc)[N], bool lse_writer) {
    if (row >= p.rows_per_group) return;
    const int f = group * p.rows_per_group + row;
    const int t = f / p.num_heads, h = f % p.num_heads;
    // acc is relative to m_tot: a sink rescales to the larger max (no overflow), c folds into the scale.
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
    const float bmm2 = p.bmm2_scale_ptr ? *p.bmm2_scale_ptr : p.bmm2_scale;
    const float scale = l_tot > 0.f ? bmm2 * c / l_tot : 0.f;
    OT* dst = static_cast<OT*>(p.out) + b * p.o_stride_b + t * p.o_stride_t + h * p.o_stride_h + d0;
#pragma unroll
    for (int k = 0; k < N / 2; ++k) {
      OT* pair = dst + (k / kPairsPerRun) * kRunStride + (k % kPairsPerRun) * 2;
      store_float<OT>(pair, acc[2 * k] * scale);
      store_float<OT>(pair + 1, acc[2 * k + 1] * scale);
    }
    if (has(mla_const::kFeatLse) && lse_writer && p.lse) {
      float lse2 = l_tot > 0.f ? m_tot + __log2f(l_tot) : kNegInf;
      if constexpr (Tr::kSplitRope) {
        // FIA: natural log, +inf for a row that sees no key (or lies past its length).
        p.lse[b * p.lse_stride_b + t * p.lse_stride_t + h * p.lse_stride_h] =
            l_tot > 0.f ? lse2 * 0.6931471805599453f : __int_as_float(0x7f800000);
      } else {
        p.lse[((long long)b * p.q_len + t) * p.num_heads + h] = p.lse_base2 ? lse2 : lse2 * 0.6931471805599453f;
      }
    }
  }

  // This CTA's partial block; cta = the (batch, row block) index the semaphores count.
  __device__ static float* partial(const MlaParams& p, long long cta, int split) {
    return p.workspace + (cta * p.num_splits + split) * kPartialFloats;
  }

  // After every thread wrote its part of the partial: true in the CTA that arrived last,
  // which then merges. `sync` is a barrier over the threads that wrote (tid 0 among them).
  // The semaphore resets itself for the next launch.
  template <class Sync>
  __device__ static bool last_to_arrive(const MlaParams& p, long long cta, unsigned* flag_s, int tid, Sync sync) {
    __threadfence();
    sync();
    if (tid == 0) {
      unsigned* sem = p.semaphores + cta;
      const unsigned prev = atomicAdd(sem, 1u);
      const bool last = prev == unsigned(p.num_splits - 1);
      if (last) *sem = 0u;  // self-resetting: the next launch finds zero
      *flag_s = last ? 1u : 0u;
    }
    sync();
    const bool last = *flag_s != 0u;
    if (last) __threadfence();
    return last;
  }

  // The combine pass (split_pass 2): blockDim.x / 128 rows of the attention pass's row
  // block blockIdx.y of request blockIdx.z per CTA (the host launches one, so that a
  // single long request still spreads over the SMs), 128 threads a row, each a float4 of
  // the 512 dims. Rows' weights first (one round of loads, reduced over the row's four
  // warps), then each thread's float4 of every split, 16 splits' loads in flight together.
  // smem (mla_combine_smem_bytes): [rows][kMaxSplits] weights, then [rows][2][4] warp maxima and sums.
  __device__ static void combine(const MlaParams& p, unsigned char* smem) {
    constexpr int kRowThreads = DV / 4, kWarpsPerRow = kRowThreads / 32, kMaxSplits = mla_const::kMaxSplits;
    static_assert(kMaxSplits % kRowThreads == 0, "each thread takes whole splits");
    pdl_wait_prior_grid();  // the attention pass's partials
    const int rows_here = blockDim.x / kRowThreads, sub = threadIdx.x / kRowThreads, d4 = threadIdx.x % kRowThreads;
    const int lr = blockIdx.x * rows_here + sub, wr = d4 / 32, lane = threadIdx.x & 31;
    const int group = blockIdx.y / p.row_blocks, rb = blockIdx.y % p.row_blocks, b = blockIdx.z;
    const long long cta = (long long)b * gridDim.y + blockIdx.y;
    const int n = p.num_splits;
    const bool row_ok = lr < kRows && rb * kRows + lr < p.rows_per_group;  // the same for the row's 128 threads
    float* wt = reinterpret_cast<float*>(smem) + sub * kMaxSplits;
    float* red = reinterpret_cast<float*>(smem) + rows_here * kMaxSplits + sub * kWarpsPerRow * 2;
    const float* base = partial(p, cta, 0);
    const float* mrow = base + kRows * DV + lr;
    float ms[kMaxSplits / kRowThreads], mx = kNegInf;
#pragma unroll
    for (int i = 0; i < kMaxSplits / kRowThreads; ++i) {
      const int sp = d4 + i * kRowThreads;
      ms[i] = row_ok && sp < n ? __ldcg(mrow + (long long)sp * kPartialFloats) : kNegInf;
      mx = fmaxf(mx, ms[i]);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) red[wr] = mx;
    __syncthreads();
    float m_tot = red[0];
#pragma unroll
    for (int i = 1; i < kWarpsPerRow; ++i) m_tot = fmaxf(m_tot, red[i]);
    float ls = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxSplits / kRowThreads; ++i) {
      const int sp = d4 + i * kRowThreads;
      const float e = merge_weight(ms[i], m_tot);  // 0 for an empty split or one past n
      wt[sp] = e;
      if (e != 0.f) ls += e * __ldcg(mrow + kRows + (long long)sp * kPartialFloats);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) ls += __shfl_xor_sync(0xffffffffu, ls, off);
    if (lane == 0) red[kWarpsPerRow + wr] = ls;
    __syncthreads();
    if (!row_ok) return;
    float l_tot = 0.f;
#pragma unroll
    for (int i = 0; i < kWarpsPerRow; ++i) l_tot += red[kWarpsPerRow + i];
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const float* src = base + lr * DV + 4 * d4;
    // kBatch splits' loads issued before any is used (a branch per split serialized
    // them); a split of weight 0 (empty, fully masked, or past n) is not read, since its
    // O may never have been written. wt holds kMaxSplits weights, 0 past n.
    constexpr int kBatch = 16;
    static_assert(kMaxSplits % kBatch == 0, "batches stay inside wt");
    for (int sp0 = 0; sp0 < n; sp0 += kBatch) {
      float e[kBatch];
      float4 x[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        e[i] = wt[sp0 + i];
        x[i] = e[i] != 0.f ? __ldcg(reinterpret_cast<const float4*>(src + (long long)(sp0 + i) * kPartialFloats))
                           : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        acc[0] += e[i] * x[i].x; acc[1] += e[i] * x[i].y; acc[2] += e[i] * x[i].z; acc[3] += e[i] * x[i].w;
      }
    }
    finish_row<4, 2, 4>(p, b, group, rb * kRows + lr, 4 * d4, m_tot, l_tot, acc, d4 == 0);
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
