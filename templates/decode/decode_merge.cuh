// The end of the GQA decode kernel: the warps' partial results merge through
// shared memory into a row's output, or, with split-KV, into the split's
// partial in the workspace, and the last split CTA of a (request, head, row
// block) merges every split's partial.
#pragma once

#include "common/dtype.cuh"
#include "common/softmax.cuh"
#include "decode/decode_params.cuh"

namespace attnjit {

template <class Tr, int kW = Tr::kMergeWarps, int kRowsCta = Tr::kRows>
struct DecodeMerge {
  using OT = typename Tr::OT;
  // W: the partial rows to merge per query row (one per warp; one in all for split-D).
  static constexpr int HD = Tr::kHeadDim, G = Tr::kGroup, W = kW, kRows = Tr::kRows;
  static constexpr int kBlocks = kRowsCta / kRows;  // 16-row blocks per CTA
  static_assert(kRowsCta % kRows == 0 && Tr::kThreads == 8 * kRows, "the split merge gives each row of a block 8 threads");
  static constexpr unsigned F = Tr::kFeatures;
  __device__ static constexpr bool has(unsigned f) { return (F & f) != 0; }

  // Writes kVec output elements of a row (and its LSE once per row), scaled by
  // 1 / (sum of weights), sinks included.
  template <int kVec, class Work>
  __device__ static void finish_row(const DecodeParams& p, const Work& w, int row, int d0,
                                    float m_tot, float l_tot, const float (&acc)[kVec]) {
    const int gr = w.rb * kRowsCta + row, qt = Tr::row_token(gr), h = Tr::row_q_head(w.kvh, gr);
    if (has(feat::kSinks) && p.sinks) {
      float sink = p.sinks[h] * kLog2e;
      if (m_tot == kNegInf) {
        m_tot = sink;
        l_tot = 1.f;
      } else {
        l_tot += fast_exp2(sink - m_tot);
      }
    }
    float scale = l_tot > 0.f ? w.v_scale * p.rcp_out_scale / l_tot : 0.f;
    OT* dst = static_cast<OT*>(p.out) + w.b * p.o_stride_b + (w.q_tok0 + qt) * p.o_stride_t +
              h * p.o_stride_h + d0;
    if constexpr (Tr::kQuantKv && !Tr::kVTok) {  // V's channel scales and offsets: (o + offset) * scale
      const long long at = (long long)Tr::row_kv_head(w.kvh, gr) * p.vc_sh;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const long long c = at + (long long)(d0 + i) * p.vc_sd;
        const float off = p.v_chan_off ? load_as_float(p.v_chan_off, p.v_chan_dtype, c) : 0.f;
        const float y = l_tot > 0.f ? (acc[i] * scale + off) * load_as_float(p.v_chan, p.v_chan_dtype, c) : 0.f;
        store_float<OT>(dst + i, y);
      }
      return write_lse(p, w, qt, h, d0, m_tot, l_tot);
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) store_float<OT>(dst + i, acc[i] * scale);
    write_lse(p, w, qt, h, d0, m_tot, l_tot);
  }
  template <class Work>
  __device__ static void write_lse(const DecodeParams& p, const Work& w, int qt, int h, int d0, float m_tot,
                                   float l_tot) {
    if (has(feat::kLse) && d0 == 0 && p.lse)
      p.lse[w.b * p.lse_stride_b + (w.q_tok0 + qt) * p.lse_stride_t + h] =
          l_tot > 0.f ? m_tot + __log2f(l_tot) : kNegInf;
  }

  template <class Work>
  __device__ static void merge_and_store(const DecodeParams& p, const Work& w, float* red_o,
                                         const float* red_m, const float* red_l, unsigned* flag_s) {
    constexpr int kChunks = kRowsCta * HD / 8;
    const bool split = w.n_splits > 1;
    const long long slot =
        (((long long)w.b * p.num_kv_heads + w.kvh) * p.row_blocks + w.rb) * p.num_splits;
    float* ws = p.workspace + slot * decode_partial_floats(HD);  // [split][rows][HD + 2]
    for (int c = threadIdx.x; c < kChunks; c += blockDim.x) {
      int row = c / (HD / 8), d0 = (c % (HD / 8)) * 8;
      if (row >= w.rows_valid) continue;
      float m_tot = kNegInf;
#pragma unroll
      for (int i = 0; i < W; ++i) m_tot = fmaxf(m_tot, red_m[i * kRowsCta + row]);
      float l_tot = 0.f, acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < W; ++i) {
        float e = merge_weight(red_m[i * kRowsCta + row], m_tot);
        l_tot += e * red_l[i * kRowsCta + row];
        const float* src = red_o + (i * kRowsCta + row) * HD + d0;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[j] += e * src[j];
      }
      if (!split) {
        finish_row(p, w, row, d0, m_tot, l_tot, acc);
      } else {
        float* part = ws + (long long)w.split * decode_partial_floats(HD);
        int r = row;
        if constexpr (kBlocks > 1) {
          r = row % kRows;
          part = block_ws(p, w, row / kRows) + (long long)w.split * decode_partial_floats(HD);
        }
        float inv = l_tot > 0.f ? 1.f / l_tot : 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) part[r * HD + d0 + j] = acc[j] * inv;
        if (d0 == 0) {
          part[kRows * HD + r] = m_tot;
          part[kRows * HD + kRows + r] = l_tot;
        }
      }
    }
    if (!split) return;

    // Last CTA of this (request, head, row block) merges every split's partial.
    __threadfence();
    __syncthreads();
    unsigned* sem = p.semaphores + (((long long)w.b * p.num_kv_heads + w.kvh) * p.row_blocks + w.rb);
    if (threadIdx.x == 0) {
      unsigned prev = atomicAdd(sem, 1u);
      bool last = prev == unsigned(w.n_splits - 1);
      if (last) *sem = 0u;  // every split has arrived: reset for the next launch
      flag_s[0] = last ? 1u : 0u;
    }
    __syncthreads();
    if (flag_s[0] == 0u) return;
    __threadfence();
    // Per-row merge weights first (8 threads per row reduce over the splits; one
    // round of loads), then every float4 of output is a weighted sum of the
    // splits' float4s: independent loads, all threads busy. This merge is the
    // serial tail of a split launch, so it is kept to few memory round trips.
    float* weight = reinterpret_cast<float*>(red_o);  // [kRows][kMaxSplits]; the warp partials are dead
    float* part_l = weight + kRows * Tr::kMaxSplits;  // [kRows][kMaxSplits]
    __syncthreads();
    if constexpr (kBlocks > 1) {
      // Split-M: the CTA's 16-row blocks one after another, through the same buffers.
      for (int blk = 0; blk < kBlocks; ++blk) {
        const int rows = min(kRows, w.rows_valid - blk * kRows);
        if (rows <= 0) break;  // the same for every thread
        if (blk > 0) __syncthreads();  // the previous block is done with the weights and sums
        merge_block(p, w, block_ws(p, w, blk), rows, blk * kRows, weight, part_l, flag_s);
      }
      return;
    }
    merge_block(p, w, ws, w.rows_valid, 0, weight, part_l, flag_s);
  }

  // The split merge of one 16-row block (rows valid of it, the CTA's rows
  // row0.. row0 + rows - 1) from its partials ws.
  template <class Work>
  __device__ static void merge_block(const DecodeParams& p, const Work& w, const float* ws, int rows, int row0,
                                     float* weight, float* part_l, unsigned* flag_s) {
    const int n = w.n_splits, stride = decode_partial_floats(HD);
    {
      const int row = threadIdx.x / 8, sub = threadIdx.x % 8;
      float m_tot = kNegInf;
      if (row < rows)
        for (int s = sub; s < n; s += 8) {
          const float* part = ws + s * stride + kRows * HD;
          const float m_s = __ldcg(part + row), l_s = __ldcg(part + kRows + row);
          weight[row * Tr::kMaxSplits + s] = m_s;
          part_l[row * Tr::kMaxSplits + s] = l_s;
          m_tot = fmaxf(m_tot, m_s);
        }
#pragma unroll
      for (int off = 1; off < 8; off *= 2) m_tot = fmaxf(m_tot, __shfl_xor_sync(0xffffffffu, m_tot, off));
      float l_tot = 0.f;
      if (row < rows)
        for (int s = sub; s < n; s += 8) {
          float* wt = weight + row * Tr::kMaxSplits + s;
          const float e = merge_weight(*wt, m_tot) * part_l[row * Tr::kMaxSplits + s];
          *wt = e;
          l_tot += e;
        }
#pragma unroll
      for (int off = 1; off < 8; off *= 2) l_tot += __shfl_xor_sync(0xffffffffu, l_tot, off);
      if (row < kRows && sub == 0) {
        red_m_final(flag_s)[row] = m_tot;
        red_m_final(flag_s)[kRows + row] = l_tot;
      }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < rows * (HD / 4); c += blockDim.x) {
      int row = c / (HD / 4), d0 = (c % (HD / 4)) * 4;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      const float* wrow = weight + row * Tr::kMaxSplits;
      const float* src = ws + row * HD + d0;
#pragma unroll 16
      for (int s = 0; s < n; ++s) {
        const float4 x = __ldcg(reinterpret_cast<const float4*>(src + s * stride));
        const float e = wrow[s];
        acc[0] += e * x.x; acc[1] += e * x.y; acc[2] += e * x.z; acc[3] += e * x.w;
      }
      finish_row(p, w, row0 + row, d0, red_m_final(flag_s)[row], red_m_final(flag_s)[kRows + row], acc);
    }
  }

  // The workspace partials [split][kRows][HD + 2] of 16-row block blk of a split-M
  // CTA: one slot per (request, kv head, 16-row block, split).
  template <class Work>
  __device__ static float* block_ws(const DecodeParams& p, const Work& w, int blk) {
    const int blocks = (p.q_seq_len * G + kRows - 1) / kRows;
    const long long slot =
        (((long long)w.b * p.num_kv_heads + w.kvh) * blocks + w.rb * kBlocks + blk) * p.num_splits;
    return p.workspace + slot * decode_partial_floats(HD);
  }

  // Final per-row (max, sum) of the split merge, kept past the flag word.
  __device__ static float* red_m_final(unsigned* flag_s) { return reinterpret_cast<float*>(flag_s + 4); }
};

}  // namespace attnjit
