// The narrow MLA tile's loads (mla_hopper_narrow.cuh holds the math both dtypes share): a
// producer warpgroup streams the CTA's tiles, block by block, into one ring of 64-token x
// 64-dim blocks (8 KB of 16-bit KV, 4 KB of fp8), and the two math warpgroups take alternate
// tiles from it.
//   - Why: with one 72 KB buffer a warpgroup (16-bit), refilled only after its own P V, each
//     tile waited out a whole load latency; fp8's two stages a warpgroup hid one. Q keeps only
//     its N rows here (18 KB at 16, not a 72 KB 64-row tile), so 227 KB hold 25 blocks at
//     N = 16 (22 at 32; 50 of fp8): the next tiles' blocks stay in flight under the math.
//   - Block g = 9 t + cb goes to slot g % slots as soon as the block a ring earlier is
//     released: 16-bit, the rope block (cb 8) once its tile's S is done, V blocks 0-3 and
//     4-7 after the two P V commit groups; fp8 (mla_hopper_narrow_fp8.cuh), each block once
//     its fragments are in registers. The schedule (which full barrier, which phase) is
//     mla_params.cuh's; a CPU test model-checks it (MlaRingProtocol).
//   - Dense pages load by TMA (one lane issues, the pages looked up a tile ahead); sparse
//     rows and calls without a tensor map by cp.async from the warpgroup's 128 threads
//     (rows without a key zero-filled). The math warpgroups look up their own rows' sparse
//     flags.
//   - setmaxnreg moves registers to the math: 224 a thread there, 56 in the producer. (The
//     increase waits until the decrease frees them: ptxas gives the kernel exactly 168 at
//     launch, 65536 / 384 rounded down to 8; MlaNarrow.CompilesWithoutSpills checks both.)
#pragma once

#include "common/hopper.cuh"
#include "common/wgmma.cuh"
#include "mla/mla_hopper_narrow.cuh"
#include "mla/mla_hopper_narrow_fp8.cuh"

namespace attnjit {

template <class Tr, bool kTma>
struct MlaNarrowRing : MlaHopperNarrow<Tr, kTma> {
  using Base = MlaHopperNarrow<Tr, kTma>;
  using Io = MlaHopperIo<Tr, kTma>;
  using typename Io::T;
  using typename Io::QT;
  using typename Io::Work;
  using Base::kN;
  using Base::kVals;
  using Base::kCols;
  using Base::kColBar;
  using Base::kPBytes;
  using Base::kOStride;
  using Base::kMathThreads;
  using Fp8 = MlaNarrowFp8<Tr, kTma>;
  static constexpr int kKvBytes = Tr::kFp8Kv ? 1 : 2, kRowBytes = 64 * kKvBytes;  // a block row: 64 dims
  static constexpr int kTile = Tr::kTile, kBlk = mla_ring_block_bytes(kKvBytes), kSlots = Tr::kRingSlots;
  static constexpr int kQBytes = 9 * kN * 128;  // Q's N rows, 16-bit (fp8 KV: widened to fp16)
  static constexpr int kProducerRegs = 56, kMathRegs = 224;
  static constexpr int kOBytes = (kN * kOStride * 4 + 15) / 16 * 16;  // a warpgroup's merged O
  enum : int { kMathBar = 9 };  // the two math warpgroups, 256 threads (kColBar + wg are 7 and 8)
  static_assert(Tr::kThreads == mla_const::kRingThreads, "two math warpgroups and a producer");
  static_assert(kSlots >= 18, "two tiles in the ring: mla_params.cuh's phase argument rests on it");
  static_assert(2 * kOBytes <= kSlots * kBlk, "the merged O of both warpgroups fits the ring");
  static_assert(mla_ring_smem_bytes(kN, kKvBytes) == Tr::kSmemBytes, "the carve below is the plan's");
  static_assert(kProducerRegs * 128 + kMathRegs * kMathThreads <= 65536, "the register file");

  struct Ring {
    unsigned char* base;  // 1024-aligned: Q's N rows, the slots, the two P^T
    u32 q, slots, pt;     // shared-space addresses
    float* st;            // the maxima exchange [2][4][N]; finish's 12 N statistics
    u64* full;            // [2][kSlots]: a slot's fills alternate between its two
    u64* empty;           // [kSlots]: the consuming warpgroup's four warps release the block
    unsigned* flag;

    // A block's place: g = fill * kSlots + slot. The math walks it by steps (a compare and a
    // select a block), where g % kSlots and g / kSlots cost a multiply-high and shifts each.
    struct Pos {
      int slot, fill;
    };
    __device__ static Pos at(int g) { return {g % kSlots, g / kSlots}; }
    __device__ static Pos step(Pos p, int n) {  // n <= kSlots
      p.slot += n;
      if (p.slot >= kSlots) {
        p.slot -= kSlots;
        ++p.fill;
      }
      return p;
    }
    __device__ u32 slot(Pos b) const { return slots + b.slot * kBlk; }
    __device__ const unsigned char* block(Pos b) const { return base + kQBytes + b.slot * kBlk; }
    // The block has landed (cp.async writes are generic-proxy ones: fenced for the wgmma).
    __device__ void wait(Pos b) const {
      mbar_wait(&full[mla_ring_full_at(b.slot, b.fill, kSlots)], mla_ring_full_phase(b.fill));
      if constexpr (!kTma) fence_proxy_async_shared();
    }
    // The warp is done with the block (its wgmma have completed, or its fragments are loaded).
    __device__ void release(Pos b, int lane) const {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[b.slot]);
    }
  };
  using Pos = typename Ring::Pos;

  __device__ static Ring carve(unsigned char* raw) {
    Ring r;
    r.base = raw + ((1024u - (smem_addr(raw) & 1023u)) & 1023u);
    r.q = smem_addr(r.base);
    r.slots = r.q + kQBytes;
    r.pt = r.slots + kSlots * kBlk;
    r.st = reinterpret_cast<float*>(r.base + kQBytes + kSlots * kBlk + 2 * kPBytes);
    r.full = reinterpret_cast<u64*>(r.st + 12 * kN);
    r.empty = r.full + 2 * kSlots;
    r.flag = reinterpret_cast<unsigned*>(r.empty + kSlots);
    return r;
  }

  // ---- the producer ----
  // TMA, one lane: each block as boxes of 64 dims x min(page_size, 64) slots, a box per page
  // (a page past the range, entry -1, is outside the map: TMA fills zeros).
  __device__ static void produce_tma(const MlaParams& p, const Work& w, const Ring& r) {
    constexpr int kBoxRows = Tr::kPageSize < 64 ? Tr::kPageSize : 64;
    int e[4];
    Io::lookup_rows(p, w, 0, 0, e);
    for (int t = 0; t < w.n_tiles; ++t) {
      int next[4];
      Io::lookup_rows(p, w, t + 1, 0, next);  // a tile ahead: its latency hides under this tile's waits
      const int j0 = w.lo + t * kTile;
#pragma unroll 1
      for (int cb = 0; cb < 9; ++cb) {
        const int g = 9 * t + cb;
        if (g >= kSlots) mbar_wait(&r.empty[g % kSlots], mla_ring_empty_parity(g, kSlots));
        u64* bar = &r.full[mla_ring_full_index(g, kSlots)];
        mbar_arrive_expect_tx(bar, kBlk);
#pragma unroll
        for (int sub = 0; sub < 64 / kBoxRows; ++sub)
          tma_load_3d(r.slot(Ring::at(g)) + sub * kBoxRows * kRowBytes, &p.kv_map, bar, cb * 64,
                      (j0 + sub * kBoxRows) % Tr::kPageSize, e[sub * kBoxRows / 16], l2_evict_first());
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) e[j] = next[j];
    }
  }

  // Chunk c (16 bytes) of row `row` in a block: 16-bit, TMA's 128-byte swizzle; fp8, its
  // 64-byte one (the layout the fp8 math's ldmatrix reads).
  __device__ static int chunk_offset(int row, int c) {
    return kKvBytes == 2 ? swizzled_offset<64>(row, c * 8) : row * 64 + ((c ^ ((row >> 1) & 3)) << 4);
  }

  // cp.async, the warpgroup's 128 threads: thread t copies chunk t % C of rows t / C + (128 /
  // C) j, C = a row's chunks (8 or 4); rows without a key are zero-filled, since V meets P = 0
  // there and 0 * garbage may be NaN. Each thread arrives on the block's barrier (count 128)
  // once its copies have landed.
  __device__ static void produce_cp_async(const MlaParams& p, const Work& w, const Ring& r, int ptid) {
    constexpr int kChunks = kRowBytes / 16, kStep = 128 / kChunks, kRowsEach = 64 / kStep;
    const unsigned char* kv = static_cast<const unsigned char*>(p.kv);
    const int cc = ptid % kChunks, r0 = ptid / kChunks;
    unsigned char* dst0 = r.base + kQBytes;
    for (int t = 0; t < w.n_tiles; ++t) {
      const int j0 = w.lo + t * kTile;
      const unsigned char* src[kRowsEach];
      unsigned bytes[kRowsEach];
#pragma unroll
      for (int j = 0; j < kRowsEach; ++j) {
        const int e = Io::lookup(p, w, j0 + r0 + kStep * j);
        long long page, pos;
        if constexpr (Tr::kSparse) {
          page = e / Tr::kPageSize;
          pos = e % Tr::kPageSize;
        } else {
          page = e;
          pos = (j0 + r0 + kStep * j) % Tr::kPageSize;
        }
        src[j] = (e >= 0 ? kv + (page * p.kv_stride_page + pos * p.kv_stride_tok) * kKvBytes : kv) + cc * 16;
        bytes[j] = e >= 0 ? 16u : 0u;
      }
#pragma unroll 1
      for (int cb = 0; cb < 9; ++cb) {
        const int g = 9 * t + cb;
        if (g >= kSlots) mbar_wait(&r.empty[g % kSlots], mla_ring_empty_parity(g, kSlots));
        unsigned char* dst = dst0 + (g % kSlots) * kBlk;
#pragma unroll
        for (int j = 0; j < kRowsEach; ++j)
          cp_async_16(dst + chunk_offset(r0 + kStep * j, cc), src[j] + cb * kRowBytes, bytes[j]);
        cp_async_mbar_arrive(&r.full[mla_ring_full_index(g, kSlots)]);
      }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  // nothing in flight from an exiting thread
  }

  // ---- the math (16-bit KV; fp8: MlaNarrowFp8::consume) ----
  // TMA: rows past the range end hold whatever their page holds there, and V meets P = 0
  // in them (0 * NaN is NaN): zeroed in the tile's eight V blocks before its P V (only the
  // range's last tile has any; cp.async zero-fills them).
  __device__ static void zero_tail(const Work& w, const Ring& r, Pos t0, int it, int tid) {
    const int valid = w.hi - w.lo - it * kTile;
    if (!kTma || valid >= kTile) return;
    for (int i = tid; i < (kTile - valid) * 64; i += 128) {  // rows x 8 blocks x 8 chunks
      const int row = valid + i / 64, cb = (i / 8) % 8;
      const u32 a = r.slot(Ring::step(t0, cb)) + row * 128 + (i % 8) * 16;
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(a), "r"(0u) : "memory");
    }
  }

  // Warpgroup wg: tiles wg, wg + 2, ...; on return m is its columns' max, l this thread's
  // share of their sums, o its O^T (relative to m).
  __device__ static void consume16(const MlaParams& p, const Work& w, const Ring& r, int wg, int tid,
                                 const int (&limit)[kCols], int lim_min, float scale_log2, float (&o)[8][kVals],
                                 float (&m)[kCols], float (&l)[kCols]) {
    const int warp = tid / 32, lane = tid % 32;
    const u32 pt = r.pt + wg * kPBytes;
    const u64 dq = desc_k_major<kN>(r.q, 0), dp = desc_k_major<kN>(pt, 0);
    Pos t0 = Ring::at(9 * wg);  // the tile's first block
    for (int it = wg; it < w.n_tiles; it += 2, t0 = Ring::step(t0, 18)) {
      bool key[2] = {true, true};
      if constexpr (Tr::kSparse)
#pragma unroll
        for (int h = 0; h < 2; ++h) key[h] = Io::lookup(p, w, w.lo + it * kTile + Base::frag_row(2 * h, warp, lane)) >= 0;
      // S^T = K Q^T over the tile's nine blocks, each once it has landed.
      float s[kVals];
#pragma unroll
      for (int cb = 0; cb < 9; ++cb) {
        const Pos b = Ring::step(t0, cb);
        r.wait(b);
        const u64 dk = desc_k_major<64>(r.slot(b), 0);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          Wgmma<T, kN>::ss(s, desc_step(dk, k_major_offset<64>(kk * 16)),
                           desc_step(dq, k_major_offset<kN>(cb * 64 + kk * 16)), cb + kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      r.release(Ring::step(t0, 8), lane);  // the rope block: only S reads it
      float alpha[kCols];
      Base::softmax(s, key, it, limit, lim_min, scale_log2, m, l, alpha, r.st + wg * 4 * kN, wg, warp, lane);
      Base::store_pt(pt, s, warp, lane);
      zero_tail(w, r, t0, it, tid);
      fence_proxy_async_shared();  // generic stores (P^T, zeroed rows), read by the wgmma
      named_barrier_sync(kColBar + wg, 128);
      Base::rescale(o, alpha);
      // O^T += V^T P^T: V blocks 0-3, then 4-7, as two commit groups, each released once done.
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) wgmma_fence_operands(o[mb]);  // (rescaled just before)
      wgmma_fence();
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) {
        const u64 dv = desc_mn_major<64>(r.slot(Ring::step(t0, mb)), 0);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          Wgmma<T, kN>::ss_amn(o[mb], desc_step(dv, mn_major_offset(kk * 16)),
                               desc_step(dp, k_major_offset<kN>(kk * 16)), 1);
        if (mb == 3 || mb == 7) wgmma_commit();
      }
      wgmma_wait<1>();
#pragma unroll
      for (int mb = 0; mb < 4; ++mb) r.release(Ring::step(t0, mb), lane);
      wgmma_wait<0>();
#pragma unroll
      for (int mb = 0; mb < 8; ++mb) wgmma_fence_operands(o[mb]);
#pragma unroll
      for (int mb = 4; mb < 8; ++mb) r.release(Ring::step(t0, mb), lane);
    }
  }

  __device__ __forceinline__ static void run(const MlaParams& p, unsigned char* smem_raw) {
    const Ring r = carve(smem_raw);
    if (threadIdx.x == 0) {
      for (int i = 0; i < 2 * kSlots; ++i) mbar_init(&r.full[i], kTma ? 1 : 128);  // TMA: the expect_tx arrival
      for (int i = 0; i < kSlots; ++i) mbar_init(&r.empty[i], 4);
    }
    __syncthreads();
    pdl_wait_prior_grid();
    const Work w = Io::work(p);
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (wg == 2) {  // the producer starts at once (its other warps leave; TMA needs one lane)
      regs_decrease<kProducerRegs>();
      if constexpr (kTma) {
        if (tid == 0) produce_tma(p, w, r);
      } else {
        produce_cp_async(p, w, r, tid);
      }
      return;
    }
    regs_increase<kMathRegs>();
    // Q's N rows (swizzled, N-row blocks), by the math threads while the first blocks land:
    // 16-bit by cp.async; fp8 KV's as fp16 in the fp8 fragments' dim order.
    if constexpr (Tr::kFp8Kv) {
      Fp8::load_q(p, w, r.base, threadIdx.x);
    } else {
      for (int i = threadIdx.x; i < kN * 72; i += kMathThreads) {  // rows x 9 blocks x 8 chunks
        const int row = i / 72, cb = (i % 72) / 8, cc = i % 8;
        const QT* src = Io::q_row(p, w, w.rb * kN + row);
        cp_async_16(r.base + swizzled_offset<kN>(row, cb * 64 + cc * 8),
                    src ? src + cb * 64 + cc * 8 : static_cast<const QT*>(p.q), src ? 16u : 0u);
      }
      cp_async_commit();
      cp_async_wait<0>();
    }
    fence_proxy_async_shared();
    named_barrier_sync(kMathBar, kMathThreads);
    const int warp = tid / 32, lane = tid % 32;
    int limit[kCols], lim_min;
    Base::column_limits(p, w, lane, limit, lim_min);
    float o[8][kVals], m[kCols], l[kCols];
    Base::clear(o, m, l);
    if constexpr (Tr::kFp8Kv) {
      Fp8::consume(p, w, r, wg, tid, limit, lim_min, Base::scale_log2(p), o, m, l);
    } else {
      consume16(p, w, r, wg, tid, limit, lim_min, Base::scale_log2(p), o, m, l);
    }
    pdl_launch_dependents();
    // The merged O reuses the slots: safe because the producer loads no block past the CTA's
    // last tile, so every fill has landed and been read by now (a producer that prefetched
    // the next work item would race with these generic stores). fp8's O^T rows are dim pairs.
    Base::template finish<Tr::kFp8Kv>(p, w, r.st, r.base + kQBytes, kOBytes, r.flag,
                                      [] { named_barrier_sync(kMathBar, kMathThreads); }, wg, warp, lane, o, m, l);
  }
};

}  // namespace attnjit
