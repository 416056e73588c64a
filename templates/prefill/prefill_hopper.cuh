// The Hopper prefill kernel (FIA, trtllm-gen backend, sm_90a): warp-specialized,
// with warpgroup MMA. Warpgroup 0 is the producer: one lane loads contiguous K/V
// tiles by TMA, or the warpgroup gathers them with cp.async (paged, the shared
// prefix, ragged tails), into a ring of 128-byte-swizzled stages, K's and V's halves
// of a stage each signalled through their own "full" mbarrier. Warpgroups 1 and 2 are
// consumers, 64 query rows each (the CTA's 128 rows of (token, group head) pairs): S =
// Q K^T with both operands in shared memory, the online softmax in registers, O += P V
// with P from registers and V read MN-major (transposed) by the wgmma itself; each
// releases K's half through its "empty" mbarrier once S is done, and V's once P V is
// (a tile later: one barrier for both would hold the next load back until then). The
// producer also loads each item's Q (cp.async) once the consumers' last S of the item
// before is done, behind "Q full" / "Q empty" mbarriers. A CTA walks work items (one,
// or a wave's share, static or from a counter) with the ring running on. The work list,
// masks, pse, paging and LSE are the portable kernel's (prefill_common.cuh).
#pragma once

#include "common/hopper.cuh"
#include "common/wgmma.cuh"
#include "prefill/prefill_common.cuh"
#include "prefill/prefill_hopper_int8.cuh"

namespace attnjit {

template <class T_, int kHdQk_, int kHdVo_, int kKvTile_, int kStages_, bool kPingPong_, int kMask_, int kPageSize_,
          bool kPse_, bool kLse_, unsigned kExt_ = 0>
struct PrefillHopperTraits {
  typedef T_ T;
  static constexpr int kHdQk = kHdQk_, kHdVo = kHdVo_, kKvTile = kKvTile_, kStages = kStages_, kMask = kMask_;
  static constexpr bool kPingPong = kPingPong_;  // the consumers take turns issuing their GEMMs
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kPse = kPse_, kLse = kLse_;
  static constexpr unsigned kExt = kExt_;  // prefill_ext bits
  static constexpr int kConsumers = 2;  // warpgroups of 64 rows
  static constexpr int kThreads = 128 * (kConsumers + 1), kRows = 64 * kConsumers, kMinBlocks = 1;
  static constexpr int kQBytes = 64 * kHdQk * 2;  // one consumer's Q tile
  static constexpr int kKStage = kKvTile * kHdQk * 2, kVStage = kKvTile * kHdVo * 2;
  // int8 K/V (antiquant, fp16 query): the producer lands raw rows in one of two slots a
  // tile ahead, then dequantises a slot into the tile's stage. A slot: the raw K and V
  // rows, then each row's {scale, offset} of K and of V (per-token modes); after the two
  // slots, each dim's {scale, offset * scale} of K and of V (per channel, tensor or head).
  static constexpr bool kKvInt8 = (kExt_ & prefill_ext::kKvInt8) != 0;
  static constexpr int kRawSlot = kKvTile * (kHdQk + kHdVo) + kKvTile * 16;
  static constexpr int kRawBytes = kKvInt8 ? 2 * kRawSlot + (kHdQk + kHdVo) * 8 : 0;
  static constexpr int kTileBytes = kConsumers * kQBytes + kStages * (kKStage + kVStage) + kRawBytes;
  // 1024: slack to align the swizzled tiles; then the full and empty mbarriers.
  // The item ring of the dynamic scheduler: kItemSlots (full, empty) mbarrier pairs and ids.
  static constexpr int kItemSlots = 4;
  // After the item ring, the producer's Q mbarriers ("Q full", "Q empty").
  static constexpr int kSmemBytes = 1024 + kTileBytes + 4 * kStages * 8 + kItemSlots * (2 * 8 + 4) + 16;
  // Registers per thread after reallocation (a multiple of 8; 128 x 56 + 256 x 224 <= 64K).
  static constexpr int kProducerRegs = 56, kConsumerRegs = 224;
  static_assert(kHdQk % 64 == 0 && kHdVo % 64 == 0 && kHdQk <= 256 && kHdVo <= 256,
                "head dims are whole 128-byte swizzle blocks, at most one wgmma wide");
  static_assert(kKvTile % 16 == 0 && kKvTile <= 256, "the KV tile is the N of one wgmma, whole k16 steps of P V");
  static_assert(!kKvInt8 || IsSame<T_, half_t>::value, "int8 K/V dequantise to fp16 (the seed's Q_S > 1 pairing)");
  static_assert((kExt_ & prefill_ext::kKvInt4) == 0, "int4 K/V: the portable kernel");
};

template <class Tr>
struct PrefillHopper {
  typedef typename Tr::T T;
  typedef PrefillCommon<Tr> C;
  static constexpr int kTile = Tr::kKvTile, kD = Tr::kHdQk, kDv = Tr::kHdVo, kStages = Tr::kStages;
  static constexpr int kConsumerWarps = Tr::kConsumers * 4, kItemSlots = Tr::kItemSlots;

  struct Smem {
    u32 q, k, v;  // shared-space addresses: consumer c's Q at q + c * kQBytes; stage st at k/v + st * k/vStage
    unsigned char* base;
    u64* full;    // [2][kStages], K's then V's: the producer's arrival(s) once the copies landed
    u64* empty;   // [2][kStages], K's then V's: each consumer warp arrives when it is done with them
    // After empty, the item ring (derived, not held: the consumers' registers are full):
    // item_full[kItemSlots] (the scheduler published item id k in slot k % kItemSlots),
    // item_empty[kItemSlots] (every lane of the reader warps took it), item_id[kItemSlots].
    __device__ __forceinline__ u64* item_full() const { return empty + 2 * Tr::kStages; }
    __device__ __forceinline__ u64* item_empty() const { return empty + 2 * Tr::kStages + Tr::kItemSlots; }
    __device__ __forceinline__ int* item_id() const {
      return reinterpret_cast<int*>(empty + 2 * Tr::kStages + 2 * Tr::kItemSlots);
    }
    // After the item ids (kItemSlots ints: a multiple of 8 bytes), "Q full", "Q empty".
    __device__ __forceinline__ u64* q_full() const {
      return reinterpret_cast<u64*>(item_id() + Tr::kItemSlots);
    }
    __device__ __forceinline__ u64* q_empty() const { return q_full() + 1; }
    // Stage st's barriers of K (value false) or V (true).
    __device__ __forceinline__ u64* full_of(bool value, int st) const { return full + (value ? Tr::kStages : 0) + st; }
    __device__ __forceinline__ u64* empty_of(bool value, int st) const { return empty + (value ? Tr::kStages : 0) + st; }
  };

  // One tensor's rows [j0, j0 + kTile) into a stage; rows at or past kv_len are
  // zero (V must be: P is 0 there, but 0 * NaN is not). Where the row's 16-byte
  // chunks divide the 128 threads, each thread keeps one column and steps over
  // rows, so a contiguous row costs one multiply-add of address arithmetic.
  // (K, or V with kValue; kP threads copy.) Paged KV and the shared prefix take kv_row per row.
  template <int kCols, bool kValue, int kP = 128>
  static __device__ __forceinline__ void load_rows(const PrefillParams& p, const PrefillWork& w, unsigned char* dst,
                                                   int j0, int tid) {
    constexpr bool kPerRow = Tr::kPageSize > 0 || C::kPrefix;
    const typename C::KvSrc s = C::template kv_src<kValue>(p);
    const void* base = s.base;
    constexpr int kChunks = kCols / 8;
    if constexpr (kP % kChunks == 0) {
      constexpr int kStep = kP / kChunks;
      const int col = (tid % kChunks) * 8, r0 = tid / kChunks;
      const long long ss = s.ss;
      const T* first = C::kv_row(p, s, w, 0) + col;  // contiguous: token 0 of the sequence
#pragma unroll 2  // more in flight at once costs the producer's 56 registers
      for (int k = 0; k < kTile / kStep; ++k) {
        const int r = r0 + k * kStep, j = j0 + r;
        const bool ok = j < w.e.kv_len;
        const T* src = static_cast<const T*>(base);
        if (ok) src = kPerRow ? C::kv_row(p, s, w, j) + col : first + (long long)j * ss;
        cp_async_16(dst + swizzled_offset<kTile>(r, col), src, ok ? 16u : 0u);
      }
    } else {
      for (int i = tid; i < kTile * kChunks; i += kP) {
        const int r = i / kChunks, col = (i % kChunks) * 8, j = j0 + r;
        const bool ok = j < w.e.kv_len;
        const T* src = ok ? C::kv_row(p, s, w, j) + col : static_cast<const T*>(base);
        cp_async_16(dst + swizzled_offset<kTile>(r, col), src, ok ? 16u : 0u);
      }
    }
  }

  // The producer: K, then V, of tile `it` into stage it % kStages once their consumers
  // released them. Each thread's arrival on a "full" barrier fires when its copies
  // land, so the producer never waits for data, only for free stages.
  // g: the CTA's tiles before this item (the ring runs on across items).
  static __device__ void produce(const PrefillParams& p, const PrefillWork& w, const Smem& sm, int tid, int g) {
    for (int it = 0; it < w.n_tiles; ++it) {
      const int st = (g + it) % kStages, j0 = w.kv_first + it * kTile, phase = (((g + it) / kStages) & 1) ^ 1;
      mbar_wait(sm.empty_of(false, st), phase);
      load_rows<kD, false>(p, w, sm.base + (sm.k - sm.q) + st * Tr::kKStage, j0, tid);
      cp_async_mbar_arrive(sm.full_of(false, st));
      mbar_wait(sm.empty_of(true, st), phase);
      load_rows<kDv, true>(p, w, sm.base + (sm.v - sm.q) + st * Tr::kVStage, j0, tid);
      cp_async_mbar_arrive(sm.full_of(true, st));
    }
  }

  // The producer with TMA (contiguous or paged K/V): one lane of one warp issues each tile
  // as kD / 64 boxes of K's 64 dims, then kDv / 64 of V's, whose bytes complete the
  // stage's "full" barrier of each (count 1: the expect_tx arrival). A tile whose rows
  // run past kv_len into rows of the tensor (not past its end, which TMA reads as 0)
  // is gathered by the warp's cp.async instead, zero-filled, as V must be.
  // (cp.async's own arrival, raising the count, trips synccheck on a count-1 barrier.)
  static __device__ void produce_tma(const PrefillParams& p, const PrefillWork& w, const Smem& sm, int lane, int g) {
    for (int it = 0; it < w.n_tiles; ++it) {
      const int st = (g + it) % kStages, j0 = w.kv_first + it * kTile, phase = (((g + it) / kStages) & 1) ^ 1;
      produce_tma_half<false>(p, w, sm, lane, st, j0, phase);
      produce_tma_half<true>(p, w, sm, lane, st, j0, phase);
    }
  }
  // K (kValue false) or V of tile j0 into stage st, once that half of the stage is free.
  template <bool kValue>
  static __device__ __forceinline__ void produce_tma_half(const PrefillParams& p, const PrefillWork& w, const Smem& sm,
                                                          int lane, int st, int j0, int phase) {
    constexpr int kDims = kValue ? kDv : kD;
    u64* full = sm.full_of(kValue, st);
    mbar_wait(sm.empty_of(kValue, st), phase);
    const u32 dst = kValue ? sm.v + st * Tr::kVStage : sm.k + st * Tr::kKStage;
    if (j0 + kTile <= w.e.kv_len || w.e.kv_tok0 + w.e.kv_len >= p.kv_map_tokens) {
      if (lane == 0) {
        mbar_arrive_expect_tx(full, u32(kTile) * kDims * 2);
        // Map dimension d's coordinate for the tile's first token (selects: an indexed array
        // would live in local memory). TND (batch stride 0) has one batch in the map: the
        // token coordinate carries kv_tok0. Paged K/V: the map's "batch" is the block (the
        // host maps only block sizes that whole tiles divide) and its token the slot.
        int b = p.k_stride_b != 0 ? w.b : 0, tok = w.e.kv_tok0 + j0;
        if constexpr (Tr::kPageSize > 0) {
          b = __ldg(p.block_table + (long long)w.b * p.block_table_stride_b + j0 / Tr::kPageSize);
          tok = j0 % Tr::kPageSize;
        }
        auto coord = [&](int d) { return p.map_dim_h == d ? w.hk : p.map_dim_b == d ? b : tok; };
        const int c1 = coord(1), c2 = coord(2), c3 = coord(3);
#pragma unroll
        for (int d = 0; d < kDims / 64; ++d)
          tma_load_4d(dst + d * kTile * 128, kValue ? &p.v_map : &p.k_map, full, d * 64, c1, c2, c3);
      }
    } else {
      load_rows<kDims, kValue, 32>(p, w, sm.base + (dst - sm.q), j0, lane);
      // At most once per item and tensor: wait for the warp's copies, then the one arrival.
      asm volatile("cp.async.wait_all;" ::: "memory");
      __syncwarp();
      if (lane == 0) mbar_arrive(full);
    }
  }

  // Waits for K (value false) or V of the CTA's tile g; the fence makes the producer's
  // cp.async or dequantised bytes (the generic proxy) visible to this thread's wgmma
  // reads (the async proxy). TMA writes through the async proxy, and the wait is all it
  // needs: `generic` is false for a tile the TMA producer loaded whole (every one but
  // an item's last, which it may gather by cp.async, produce_tma_half).
  static __device__ __forceinline__ void wait_full(const Smem& sm, bool value, int g, bool generic) {
    mbar_wait(sm.full_of(value, g % kStages), (g / kStages) & 1);
    if (generic) fence_proxy_async_shared();
  }
  // The item's Q (the producer's n-th load) has landed; the fence, as in
  // wait_full, makes its cp.async bytes visible to the wgmma's reads.
  static __device__ __forceinline__ void wait_q(const Smem& sm, int n) {
    mbar_wait(sm.q_full(), n & 1);
    fence_proxy_async_shared();
  }
  // This warp is done with K (value false) or V of stage st.
  static __device__ __forceinline__ void release(const Smem& sm, bool value, int st, int lane) {
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.empty_of(value, st));
  }

  // S = Q K^T (64 x kTile) of the stage's K, both operands in shared memory (issued, not waited for).
  // (Descriptors built once per operand, then stepped by constant offsets: desc_step.)
  static __device__ __forceinline__ void issue_qk(float (&s)[kTile / 2], u32 sq, u32 sk) {
    const u64 dq = desc_k_major<64>(sq, 0), dk = desc_k_major<kTile>(sk, 0);
#pragma unroll
    for (int k0 = 0; k0 < kD; k0 += 16)
      Wgmma<T, kTile>::ss(s, desc_step(dq, k_major_offset<64>(k0)), desc_step(dk, k_major_offset<kTile>(k0)), k0 > 0);
    wgmma_commit();
  }
  // O += P V, V MN-major from the stage (issued, not waited for).
  static __device__ __forceinline__ void issue_pv(float (&o)[kDv / 2], const u32 (&pa)[kTile / 16][4], u32 sv) {
    const u64 dv = desc_mn_major<kTile>(sv, 0);
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) Wgmma<T, kDv>::rs_mn(o, pa[kk], desc_step(dv, mn_major_offset(kk * 16)), 1);
    wgmma_commit();
  }

  // How a tile's scores are read: every key visible to both rows (kInterior: raw
  // scores, the scale folds into the exponent's fused multiply-add, a positive scale
  // keeping the max), a band's edge without a mask tensor or pse (kEdge: raw scores,
  // keys outside a row's [jlo, jhi] set to -inf by one select), or scored per element.
  enum class Tile { kInterior, kEdge, kScored };
  // The tile's max for each of the thread's two rows, in the log2 domain, in kAccs
  // accumulators a row: dependent chains of a quarter of a row's elements on interior
  // tiles (a warp issues in order; at head dim 64 one chain a row was 12% of the
  // consumers' stall samples), half elsewhere (registers: four a row on edge tiles
  // spilled 36 bytes at head dim 256, causal). Elements 0 .. 2 * kAccs - 1 hold one
  // accumulator each: they start them.
  template <Tile kKind>
  static __device__ __forceinline__ void tile_max(const PrefillParams& p, const typename C::Rows& R, int lane, int j0,
                                                  float (&s)[kTile / 2], float (&mx)[2]) {
    constexpr int kAccs = kKind == Tile::kInterior ? 4 : 2;
    // kEdge: key j0 + c of the thread's first column is visible where lo <= c <= hi.
    int lo[2] = {0, 0}, hi[2] = {0, 0};
    if constexpr (kKind == Tile::kEdge) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        lo[hf] = R.jlo[hf] - j0 - (lane % 4) * 2;
        hi[hf] = R.jhi[hf] - j0 - (lane % 4) * 2;
      }
    }
    float acc[2][kAccs];
#pragma unroll
    for (int i = 0; i < kTile / 2; ++i) {
      const int hf = (i % 4) / 2, c = (i / 4) * 8 + (i % 2);
      if constexpr (kKind == Tile::kEdge) {
        if (c < lo[hf] || c > hi[hf]) s[i] = kNegInf;
      } else if constexpr (kKind == Tile::kScored) {
        s[i] = C::score(p.scale, R.jlo[hf], R.jhi[hf], R.mask[hf], R.pse[hf], j0 + (lane % 4) * 2 + c, s[i]);
      }
      float& a = acc[hf][kAccs == 4 ? ((i / 4) % 2) * 2 + i % 2 : i % 2];
      a = i < 2 * kAccs ? s[i] : fmaxf(a, s[i]);
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      mx[hf] = fmaxf(acc[hf][0], acc[hf][1]);
      if constexpr (kAccs == 4) mx[hf] = fmaxf(mx[hf], fmaxf(acc[hf][2], acc[hf][3]));
      if constexpr (kKind != Tile::kScored) mx[hf] *= p.scale * kLog2e;
    }
  }

  // The online softmax of tile j0 in place: s becomes P (fp32), m and l advance;
  // returns alpha, the factor O must take before P V is added.
  static __device__ __forceinline__ void softmax(const PrefillParams& p, const typename C::Rows& R, int lane, int j0,
                                                 float (&s)[kTile / 2], float (&m)[2], float (&l)[2],
                                                 float (&alpha)[2]) {
    // Raw scores (kInterior, kEdge) need a positive scale; a mask tensor or pse scores each element.
    const bool raw = Tr::kMask != prefill_mask::kTensor && !Tr::kPse && p.scale > 0.f;
    const bool interior = raw && j0 >= max(R.jlo[0], R.jlo[1]) && j0 + kTile - 1 <= min(R.jhi[0], R.jhi[1]);
    float mx[2];
    if (interior) tile_max<Tile::kInterior>(p, R, lane, j0, s, mx);
    else if (raw) tile_max<Tile::kEdge>(p, R, lane, j0, s, mx);
    else tile_max<Tile::kScored>(p, R, lane, j0, s, mx);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      mx[hf] = quad_max(mx[hf]);
      alpha[hf] = online_max_step(m[hf], l[hf], mx[hf]);
    }
    const float mul = raw ? p.scale * kLog2e : 1.0f;
    float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // two chains a row
#pragma unroll
    for (int i = 0; i < kTile / 2; ++i) {
      const int hf = (i % 4) / 2;
      s[i] = fast_exp2(fmaf(s[i], mul, -mx[hf]));
      sum[hf][i % 2] += s[i];
    }
    l[0] += sum[0][0] + sum[0][1];
    l[1] += sum[1][0] + sum[1][1];
  }

  // P in the A-operand layout: k step kk takes the 8-wide blocks 2kk and 2kk + 1.
  static __device__ __forceinline__ void pack_p(const float (&s)[kTile / 2], u32 (&pa)[kTile / 16][4]) {
#pragma unroll
    for (int i = 0; i < kTile / 2; i += 2) pa[i / 8][((i / 4) % 2) * 2 + (i % 4) / 2] = pack2<T>(s[i], s[i + 1]);
  }

  // The producer's kP threads load item w's Q (both consumers' 64 rows, zero past r_end,
  // swizzled as the wgmma reads them) once the consumers' last S of the item before is
  // done ("Q empty"; n counts the loads), so the load runs ahead of the consumers, under
  // that item's last P V and epilogue; each thread's arrival on "Q full" fires when its
  // copies land. A thread takes whole rows: a row's address (its division by the group)
  // is computed once. (Measured on an H100 against the consumers loading their own Q,
  // PERFORMANCE.md, forty-ninth session: B16 S2K causal +6%, hd64 full +3%, B4 S8K +1%.)
  template <int kP>
  static __device__ __forceinline__ void produce_q(const PrefillParams& p, const PrefillWork& w, const Smem& sm,
                                                   int tid, int n) {
    mbar_wait(sm.q_empty(), (n & 1) ^ 1);
    for (int r = tid; r < Tr::kRows; r += kP) {
      const int row = w.r0 + r;
      const bool ok = row < w.r_end;
      const T* src = ok ? C::q_row(p, w, row) : static_cast<const T*>(p.q);
      unsigned char* dst = sm.base + (r / 64) * Tr::kQBytes;
#pragma unroll 4
      for (int col = 0; col < kD; col += 8)
        cp_async_16(dst + swizzled_offset<64>(r % 64, col), ok ? src + col : src, ok ? 16u : 0u);
    }
    cp_async_mbar_arrive(sm.q_full());
  }

  // A consumer warpgroup: its 64 rows of item w over every visible tile; g is the
  // CTA's tiles before the item. The P V of tile it - 1 runs on the tensor cores
  // while the softmax of tile it runs here: each iteration issues S(it) and then
  // PV(it - 1), waits for S(it) only, does the softmax, then waits for PV(it - 1)
  // before O is rescaled and P repacked. The producer loaded the item's Q (its qn-th
  // load); each warp releases it once its last S is done, so the next item's Q loads
  // under this one's last P V and the output's stores.
  static __device__ void consume(const PrefillParams& p, const PrefillWork& w, const Smem& sm, int c, int tid, int g,
                                 int qn) {
    const int warp = tid / 32, lane = tid % 32;
    const u32 sq = sm.q + c * Tr::kQBytes;
    if (w.n_tiles > 0) wait_q(sm, qn);
    auto q_read = [&] {  // this warp's last S of the item is done
      __syncwarp();
      if (lane == 0) mbar_arrive(sm.q_empty());
    };

    const typename C::Rows R = C::rows_of(p, w, c * 4 + warp, lane);
    float o[kDv / 2];
#pragma unroll
    for (int i = 0; i < kDv / 2; ++i) o[i] = 0.f;
    float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f}, alpha[2];
    float s[kTile / 2];
    u32 pa[kTile / 16][4];

    // Ping-pong: the consumers take turns issuing their GEMMs (named barriers 3 and
    // 4), so that one's softmax runs under the other's GEMMs. Both walk the same
    // tiles, so the turns pair up across items (run() starts and ends the exchange).
    auto turn_begin = [&] {
      if constexpr (Tr::kPingPong) named_barrier_sync(3 + c, 256);
    };
    auto turn_end = [&] {
      if constexpr (Tr::kPingPong) named_barrier_arrive(3 + (c ^ 1), 256);
    };

    if (w.n_tiles > 0) {
      wait_full(sm, false, g, !p.kv_tma || w.n_tiles == 1);
      turn_begin();
      wgmma_fence();
      issue_qk(s, sq, sm.k + (g % kStages) * Tr::kKStage);
      turn_end();
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      release(sm, false, g % kStages, lane);
      if (w.n_tiles == 1) q_read();
      softmax(p, R, lane, w.kv_first, s, m, l, alpha);
      pack_p(s, pa);
    }
    for (int it = 1; it < w.n_tiles; ++it) {
      const int st = (g + it) % kStages, prev = (g + it - 1) % kStages;
      wait_full(sm, false, g + it, !p.kv_tma || it == w.n_tiles - 1);
      wait_full(sm, true, g + it - 1, !p.kv_tma);
      turn_begin();
      wgmma_fence();
      issue_qk(s, sq, sm.k + st * Tr::kKStage);
      issue_pv(o, pa, sm.v + prev * Tr::kVStage);
      turn_end();
      wgmma_wait<1>();  // S(it); PV(it - 1) may still run
      wgmma_fence_operands(s);
      release(sm, false, st, lane);  // K(it) is read: the producer may refill it under the softmax
      if (it == w.n_tiles - 1) q_read();
      softmax(p, R, lane, w.kv_first + it * kTile, s, m, l, alpha);
      wgmma_wait<0>();
      wgmma_fence_operands(o);
      release(sm, true, prev, lane);
      // Once the row maxima settle, alpha is 1 across the warp: skip the rescale.
      if (!__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) {
#pragma unroll
        for (int i = 0; i < kDv / 2; ++i) o[i] *= alpha[(i % 4) / 2];
      }
      pack_p(s, pa);
    }
    if (w.n_tiles > 0) {
      const int last = (g + w.n_tiles - 1) % kStages;
      wait_full(sm, true, g + w.n_tiles - 1, true);
      turn_begin();
      wgmma_fence();
      issue_pv(o, pa, sm.v + last * Tr::kVStage);
      turn_end();
      wgmma_wait<0>();
      wgmma_fence_operands(o);
      release(sm, true, last, lane);
    }

#pragma unroll  // (the int8 epilogue's larger body kept it rolled: R and m went to the stack)
    for (int hf = 0; hf < 2; ++hf)
      C::write_row(p, w, R, hf, lane, m[hf], l[hf], [&](int n, int e) { return o[4 * n + e]; });
  }

  // Work item i of the launch: tile i % tiles of KV head i / tiles.
  static __device__ __forceinline__ PrefillWork item_work(const PrefillParams& p, int item) {
    return C::template find_work<kTile>(p, item % p.tiles, item / p.tiles, 0);
  }

  // The CTA's k-th item, or -1. Static (p.item_counter null): blockIdx.x + k * gridDim.x.
  // Dynamic: the producer's leader thread takes the next id from the launch's counter
  // and publishes it in slot k % kItemSlots of the item ring; the reader warps (every
  // lane) take it there, so CTAs that finish early take more items and none idles
  // while others hold a long causal tail. The last CTA out resets the counter.
  static __device__ __forceinline__ int next_item(const PrefillParams& p, const Smem& sm, int k, bool leader,
                                                  bool reader) {
    const int items = p.tiles * p.kv_heads;
    if (!p.item_counter) {
      const int item = blockIdx.x + k * gridDim.x;
      return item < items ? item : -1;
    }
    const int slot = k % kItemSlots;
    if (leader) {
      mbar_wait(&sm.item_empty()[slot], ((k / kItemSlots) & 1) ^ 1);
      int item = int(atomicAdd(p.item_counter, 1u));
      if (item >= items) item = -1;
      sm.item_id()[slot] = item;
      mbar_arrive(&sm.item_full()[slot]);
      if (item < 0 && atomicAdd(p.item_counter + 1, 1u) == gridDim.x - 1) {
        atomicExch(p.item_counter, 0u);  // leave the counters zero for the stream's next launch
        atomicExch(p.item_counter + 1, 0u);
      }
      return item;
    }
    if (!reader) return -1;
    mbar_wait(&sm.item_full()[slot], (k / kItemSlots) & 1);
    const int item = sm.item_id()[slot];
    mbar_arrive(&sm.item_empty()[slot]);  // every lane, after its own read (racecheck sees each)
    return item;
  }

  // The CTA walks its items (the host sizes the grid: one item per CTA, or one wave
  // with a static or dynamic schedule), its stage ring and ping-pong running on.
  static __device__ void run(const PrefillParams& p, unsigned char* smem_raw) {
    Smem sm;
    sm.base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    sm.q = smem_addr(sm.base);
    sm.k = sm.q + Tr::kConsumers * Tr::kQBytes;
    sm.v = sm.k + kStages * Tr::kKStage;
    sm.full = reinterpret_cast<u64*>(sm.base + Tr::kTileBytes);
    sm.empty = sm.full + 2 * kStages;
    // Readers of the item ring: the consumer warps, and the producer's other warps
    // when they gather with cp.async (with TMA one warp produces; lane 0 leads it).
    const int item_readers = kConsumerWarps + (p.kv_tma ? 0 : 3);
    if (threadIdx.x == 0) {
      for (int st = 0; st < 2 * kStages; ++st) {  // K's stages, then V's
        mbar_init(&sm.full[st], p.kv_tma ? 1 : 128);
        mbar_init(&sm.empty[st], kConsumerWarps);
      }
      for (int i = 0; i < kItemSlots; ++i) {
        mbar_init(&sm.item_full()[i], 1);
        mbar_init(&sm.item_empty()[i], item_readers * 32);
      }
      mbar_init(sm.q_full(), p.kv_tma ? 32 : 128);  // each producer thread's cp.async arrival
      mbar_init(sm.q_empty(), kConsumerWarps);
    }
    __syncthreads();
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    int g = 0;   // the CTA's tiles so far
    int qn = 0;  // the items whose Q the producer loaded so far (those with a tile to see)
    if (wg == 0) {
      regs_decrease<Tr::kProducerRegs>();
      // Thread 0 leads; its warp hears the item by shuffle, warps 1-3 (cp.async) read the ring.
      // (Two loops: one loop over both paths spilled at 56 registers.)
      if (p.kv_tma) {
        if (tid >= 32) return;  // one warp issues TMA
        for (int k = 0;; ++k) {
          const int item = __shfl_sync(0xffffffffu, next_item(p, sm, k, tid == 0, false), 0);
          if (item < 0) break;
          const PrefillWork w = item_work(p, item);
          if (w.zero) continue;
          if (w.n_tiles > 0) produce_q<32>(p, w, sm, tid, qn++);
          produce_tma(p, w, sm, tid, g);
          g += w.n_tiles;
        }
      } else {
        for (int k = 0;; ++k) {
          int item = next_item(p, sm, k, tid == 0, tid >= 32);
          if (tid < 32) item = __shfl_sync(0xffffffffu, item, 0);
          if (item < 0) break;
          const PrefillWork w = item_work(p, item);
          if (w.zero) continue;
          if (w.n_tiles > 0) produce_q<128>(p, w, sm, tid, qn++);
          if constexpr (Tr::kKvInt8) PrefillHopperInt8<Tr>::produce(p, w, sm, tid, g);
          else produce(p, w, sm, tid, g);
          g += w.n_tiles;
        }
      }
      asm volatile("cp.async.wait_all;" ::: "memory");  // no copy outlives its thread
      return;
    }
    regs_increase<Tr::kConsumerRegs>();
    const int c = wg - 1;
    // Consumer 1 hands consumer 0 the first turn; consumer 0 takes back the last hand-over.
    if constexpr (Tr::kPingPong)
      if (c == 1) named_barrier_arrive(3, 256);
    for (int k = 0, item; (item = next_item(p, sm, k, false, true)) >= 0; ++k) {
      const PrefillWork w = item_work(p, item);
      if (w.zero) {
        C::zero_rows(p, w, c * 128 + tid, 256);
        continue;
      }
      consume(p, w, sm, c, tid, g, qn);
      qn += w.n_tiles > 0;
      g += w.n_tiles;
    }
    if constexpr (Tr::kPingPong)
      if (c == 0) named_barrier_sync(3, 256);
  }
};

}  // namespace attnjit
