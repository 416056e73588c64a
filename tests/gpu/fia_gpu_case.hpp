// The FIA GPU tests' case, its float64 check and the backend loop, shared by
// fia_gpu_test.cpp (prefill kernels) and fia_decode_gpu_test.cpp (Q_S = 1 on the
// decode kernel). Outputs start as NaN; every element is checked.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "common/attention_reference.hpp"
#include "common/device_tensor.hpp"
#include "common/fia_reference.hpp"
#include "fia_kv_quant.hpp"
#include "gpu_test_env.hpp"
#include "ops/fia/fia_plan.hpp"


namespace attnjit::fia_gpu {


using testing::DeviceTensor;

struct FiaCase {
  DType dtype = DType::kBFloat16;
  std::string layout = "BSND";
  int batch = 2, heads = 4, kv_heads = 2, head_dim = 128, head_dim_v = 128;
  int q_seq = 100, kv_seq = 150;
  std::vector<int64_t> q_list, kv_list;  // actual_seq_lengths(_kv); TND: cumulative
  int sparse = 0;
  int64_t pre = 2147483647, next = 2147483647;
  int mask = 0;        // 0 none; 1 full (modes 0/1; Q_S = 1 too); 2 the 2048x2048 (modes 2-4)
  int mask_shape = 0;  // which of the seed's shapes (see make_mask)
  int pse = 0;         // 0 none; 1 (B, N, ..); 2 (1, N, ..)
  int block_size = 0;  // paged KV when > 0
  bool paged_rank4 = false;
  bool lse = false;
  double scale = 0;  // 0: 1/sqrt(D)
  Backend backend = Backend::kAuto;  // run_fia: auto runs every backend this GPU has
  std::string kernel;    // non-empty: the launched kernel's name starts with it ("decode.", "prefill.")
  int kv_pair = -1;      // 1 / 0: the launched decode kernel does / does not pair KV heads (kvpair)
  bool capture = false;  // run once on a stream, then capture the call in a graph and replay it
  // Left padding (query/kv_padding_size, 1 or B values; empty: none): applies with the lists.
  std::vector<int64_t> q_pad, kv_pad;
  int prefix = 0;           // shared prefix S (0: none)
  int64_t prefix_len = -1;  // actual_shared_prefix_len (-1: absent, the prefix's S)
  int quant = 0;            // int8 output: 1 per tensor, 2 per channel (quant_scale2)
  bool quant_offset = false, quant_bf16 = false;
  FiaKvQuant kvq;  // quantised K/V (antiquant); bits 0: K/V in the query's dtype
  int expect_pass = -1;  // 1 / 0: the call must (not) dequantise int8 K/V first (dqpass); -1: either
  bool int8_qkv = false;  // the full int8 path: int8 Q/K/V and their scales; dtype (fp16) is pse's and the output's
  bool negative_ds1 = false;  // int8_qkv: dequant_scale1 < 0 (the scores' sign flips)
};

inline std::string describe(const FiaCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + " " + c.layout + " B" + std::to_string(c.batch) + " N" +
                  std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " D" + std::to_string(c.head_dim) +
                  "/" + std::to_string(c.head_dim_v) + " S" + std::to_string(c.q_seq) + "/" + std::to_string(c.kv_seq) +
                  " sparse" + std::to_string(c.sparse) + " pre" + std::to_string(c.pre) + " next" +
                  std::to_string(c.next) + " mask" + std::to_string(c.mask) + "." + std::to_string(c.mask_shape) +
                  " pse" + std::to_string(c.pse) + " bs" + std::to_string(c.block_size) +
                  (c.paged_rank4 ? "r4" : "") + (c.lse ? " lse" : "") +
                  (c.backend == Backend::kTrtllmGen ? " trtllm-gen" : c.backend == Backend::kXqa ? " xqa" : "") +
                  " prefix" + std::to_string(c.prefix) + "/" + std::to_string(c.prefix_len) + " quant" +
                  std::to_string(c.quant) + (c.quant_offset ? "o" : "") + (c.quant_bf16 ? "bf" : "") + (c.int8_qkv ? (c.negative_ds1 ? " int8qkv ds1<0" : " int8qkv") : "") + " qpad[";
  for (auto v : c.q_pad) s += std::to_string(v) + ",";
  s += "] kvpad[";
  for (auto v : c.kv_pad) s += std::to_string(v) + ",";
  s += "] q[";
  for (auto v : c.q_list) s += std::to_string(v) + ",";
  s += "] kv[";
  for (auto v : c.kv_list) s += std::to_string(v) + ",";
  return s + "]" + describe(c.kvq);
}

inline int64_t list_at(const std::vector<int64_t>& v, int b, int64_t d) { return v.empty() ? d : v.size() == 1 ? v[0] : v[size_t(b)]; }

// Runs one case on c.backend; returns the relative L2 error (0 in prewarm mode).
inline double run_fia_on(const FiaCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const bool tnd = c.layout == "TND", bnsd_in = c.layout == "BNSD" || c.layout == "BNSD_BSND";
  const bool bnsd_out = c.layout == "BNSD", decode = !tnd && c.q_seq == 1;
  const int B = c.batch, N = c.heads, KN = c.kv_heads, D = c.head_dim, DV = c.head_dim_v, G = N / KN;
  const bool paged = c.block_size > 0;
  // Actual lengths and token offsets.
  std::vector<int> ql(B), kl(B), q0(B, 0), k0(B, 0);
  for (int b = 0; b < B; ++b) {
    if (tnd) {
      q0[b] = b ? int(c.q_list[b - 1]) : 0;
      k0[b] = b ? int(c.kv_list[b - 1]) : 0;
      ql[b] = int(c.q_list[b]) - q0[b];
      kl[b] = int(c.kv_list[b]) - k0[b];
    } else {
      ql[b] = decode ? 1 : int(list_at(c.q_list, b, c.q_seq));
      kl[b] = int(list_at(c.kv_list, b, c.kv_seq));
    }
  }
  // Left padding: the valid windows [S - pad - len, S - pad) (negative pads count as
  // 0); a window that does not fit leaves its batch 0 (the kernel sees no key there).
  std::vector<int> qoff(B, 0), kvoff(B, 0), fits(B, 1);
  const bool qpad_on = !c.q_pad.empty() && !decode && !c.q_list.empty();
  const bool kvpad_on = !c.kv_pad.empty() && !c.kv_list.empty();
  for (int b = 0; b < B; ++b) {
    if (qpad_on) fits[b] = testing::fia_left_pad_window(c.q_seq, list_at(c.q_pad, b, 0), ql[b], &qoff[b]);
    if (kvpad_on && !testing::fia_left_pad_window(c.kv_seq, list_at(c.kv_pad, b, 0), kl[b], &kvoff[b])) fits[b] = 0;
    if (!fits[b]) qoff[b] = 0;  // the kernel writes the batch's (zero) rows from token 0
  }
  // Shared prefix: a batch's KV is [prefix (P tokens) | its own].
  const int P = c.prefix ? testing::fia_prefix_len(c.prefix, c.prefix_len >= 0, c.prefix_len) : 0;
  const int T = tnd ? int(c.q_list.back()) : 0, Tkv = tnd ? int(c.kv_list.back()) : 0;
  const int QS = c.q_seq;
  // Paged KV: shuffled blocks, a spare column in the table.
  const int bs = c.block_size;
  int max_blocks = 0, num_blocks = 0;
  std::vector<int> table;
  if (paged) {
    for (int b = 0; b < B; ++b) max_blocks = std::max(max_blocks, (kl[b] + bs - 1) / bs);
    max_blocks += 1;
    num_blocks = B * max_blocks;
    std::vector<int> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table = ids;
  }
  int max_kv = 0;
  for (int b = 0; b < B; ++b) max_kv = std::max(max_kv, kl[b]);
  const int kv_cols = (paged ? ((max_kv + bs - 1) / bs) * bs : c.kv_seq) + c.prefix;

  // Device-buffer indices of logical elements.
  auto qidx = [&](int b, int s, int h, int d) -> size_t {
    if (tnd) return (size_t(q0[b] + s) * N + h) * D + d;
    if (bnsd_in) return ((size_t(b) * N + h) * QS + s) * D + d;
    return ((size_t(b) * QS + s) * N + h) * D + d;
  };
  auto kvidx = [&](int b, int j, int hk, int d, int dim) -> size_t {
    if (paged) {
      const size_t blk = size_t(table[size_t(b) * max_blocks + j / bs]);
      const int off = j % bs;
      if (c.paged_rank4) return ((blk * KN + hk) * bs + off) * dim + d;
      return (blk * bs + off) * size_t(KN) * dim + size_t(hk) * dim + d;
    }
    if (tnd) return (size_t(k0[b] + j) * KN + hk) * dim + d;
    if (bnsd_in) return ((size_t(b) * KN + hk) * c.kv_seq + j) * dim + d;
    return ((size_t(b) * c.kv_seq + j) * KN + hk) * dim + d;
  };
  auto pidx = [&](int j, int hk, int d, int dim) -> size_t {  // the prefix, in the key's layout with batch 1
    if (bnsd_in) return (size_t(hk) * c.prefix + j) * dim + d;
    return (size_t(j) * KN + hk) * dim + d;
  };
  auto oidx = [&](int b, int s, int h, int dv) -> size_t {
    if (tnd) return (size_t(q0[b] + s) * N + h) * DV + dv;
    if (bnsd_out) return ((size_t(b) * N + h) * QS + s) * DV + dv;
    return ((size_t(b) * QS + s) * N + h) * DV + dv;
  };
  auto lidx = [&](int b, int s, int h) -> size_t {
    return tnd ? size_t(q0[b] + s) * N + h : (size_t(b) * N + h) * QS + s;
  };

  std::vector<int64_t> qshape, kshape, vshape, oshape, lshape;
  if (tnd) qshape = {T, N, D}, oshape = {T, N, DV}, lshape = {T, N, 1};
  else if (c.layout == "BSH") qshape = {B, QS, N * D}, oshape = {B, QS, N * DV};
  else if (c.layout == "BSND") qshape = {B, QS, N, D}, oshape = {B, QS, N, DV};
  else qshape = {B, N, QS, D}, oshape = bnsd_out ? std::vector<int64_t>{B, N, QS, DV} : std::vector<int64_t>{B, QS, N, DV};
  if (!tnd) lshape = {B, N, QS, 1};
  if (paged) {
    kshape = c.paged_rank4 ? std::vector<int64_t>{num_blocks, KN, bs, D} : std::vector<int64_t>{num_blocks, bs, KN * D};
    vshape = c.paged_rank4 ? std::vector<int64_t>{num_blocks, KN, bs, DV} : std::vector<int64_t>{num_blocks, bs, KN * DV};
  } else if (tnd) kshape = {Tkv, KN, D}, vshape = {Tkv, KN, DV};
  else if (c.layout == "BSH") kshape = {B, c.kv_seq, KN * D}, vshape = {B, c.kv_seq, KN * DV};
  else if (c.layout == "BSND") kshape = {B, c.kv_seq, KN, D}, vshape = {B, c.kv_seq, KN, DV};
  else kshape = {B, KN, c.kv_seq, D}, vshape = {B, KN, c.kv_seq, DV};
  auto numel = [](const std::vector<int64_t>& s) {
    size_t n = 1;
    for (auto x : s) n *= size_t(x);
    return n;
  };
  // The full int8 path: raw int8 Q/K/V; the reference applies the scales.
  std::optional<Int8QkvScales> i8 = c.int8_qkv ? std::optional(int8_qkv_scales(rng)) : std::nullopt;
  if (i8 && c.negative_ds1) i8->ds1 = -i8->ds1;
  auto qv = i8 ? int8_raw(numel(qshape), rng) : util::quantize(testing::random_values(numel(qshape), rng), c.dtype);
  // Quantised K/V: raw integers; the reference dequantises them (scales of positions a
  // batch does not hold are NaN where they are per token: a kernel must not read them).
  std::optional<KvQuantData> kq;
  if (c.kvq.bits) {
    const int scale_s = paged ? max_blocks * bs : c.kv_seq;
    kq.emplace(c.kvq, B, KN, D, DV, scale_s, num_blocks, bs, c.dtype, c.layout, decode, rng);
    for (int b = 0; b < B; ++b) kq->poison_tokens(b, paged ? 0 : kvoff[b], kl[b]);
  }
  auto kv = kq ? kq->raw(numel(kshape), rng)
           : i8 ? int8_raw(numel(kshape), rng)
                : util::quantize(testing::random_values(numel(kshape), rng), c.dtype);
  auto vv = kq ? kq->raw(numel(vshape), rng)
           : i8 ? int8_raw(numel(vshape), rng)
                : util::quantize(testing::random_values(numel(vshape), rng), c.dtype);
  DeviceTensor q, k, v, out(c.quant ? DType::kInt8 : c.dtype, oshape);
  DeviceTensor ds1_t, qs1_t, ds2_t;
  if (i8) {
    upload_int8(q, qshape, qv);
  } else {
    q.allocate(c.dtype, qshape);
    q.upload_floats(qv);
  }
  if (i8) {  // int8 holds no NaN: rows outside the windows keep raw values
    upload_int8(k, kshape, kv);
    upload_int8(v, vshape, vv);
  } else if (kq) {  // rows outside the windows keep their raw values: their scales are the poison
    kq->upload(k, kshape, kv);
    kq->upload(v, vshape, vv);
  } else if (!paged && !tnd) {
    // K/V rows outside a batch's actual window (past its length, or before a left pad's
    // start) hold NaN on the device: a kernel must neither score them nor let 0 * NaN
    // into P V (the reference never reads them).
    auto k_dev = kv, v_dev = vv;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < c.kv_seq; ++j) {
        if (j >= kvoff[b] && j < kvoff[b] + kl[b]) continue;
        for (int hk = 0; hk < KN; ++hk) {
          for (int d = 0; d < D; ++d) k_dev[kvidx(b, j, hk, d, D)] = NAN;
          for (int d = 0; d < DV; ++d) v_dev[kvidx(b, j, hk, d, DV)] = NAN;
        }
      }
    k.allocate(c.dtype, kshape);
    v.allocate(c.dtype, vshape);
    k.upload_floats(k_dev);
    v.upload_floats(v_dev);
  } else {
    k.allocate(c.dtype, kshape);
    v.allocate(c.dtype, vshape);
    k.upload_floats(kv);
    v.upload_floats(vv);
  }
  out.poison();  // int8: -1 everywhere, and rows outside the windows must read 0
  DeviceTensor lse(DType::kFloat32, lshape);
  lse.poison();

  FiaArgs a;
  a.query = q.view;
  a.key = k.view;
  a.value = v.view;
  a.attention_out = out.view;
  a.num_heads = N;
  a.num_key_value_heads = KN == N && rng() % 2 ? 0 : KN;
  a.input_layout = c.layout;
  a.scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(D));
  a.backend = c.backend;
  a.actual_seq_lengths = c.q_list;
  a.actual_seq_lengths_kv = c.kv_list;
  a.sparse_mode = c.sparse;
  a.pre_tokens = c.pre;
  a.next_tokens = c.next;
  a.softmax_lse_flag = c.lse;
  if (c.lse) a.softmax_lse = lse.view;
  DeviceTensor qpad_t, kvpad_t, plen_t, kp_t, vp_t, qs_t, qo_t;
  std::vector<float> kpv, vpv, qsv, qov;
  if (!c.q_pad.empty()) {
    qpad_t.allocate(DType::kInt64, {int64_t(c.q_pad.size())});
    qpad_t.upload_pod(c.q_pad);
    a.query_padding_size = qpad_t.view;
  }
  if (!c.kv_pad.empty()) {
    kvpad_t.allocate(DType::kInt64, {int64_t(c.kv_pad.size())});
    kvpad_t.upload_pod(c.kv_pad);
    a.kv_padding_size = kvpad_t.view;
  }
  if (c.prefix) {
    std::vector<int64_t> ks = kshape, vs = vshape;
    ks[0] = vs[0] = 1;
    ks[bnsd_in ? 2 : 1] = vs[bnsd_in ? 2 : 1] = c.prefix;
    if (kq) {
      kpv = kq->raw(numel(ks), rng);
      vpv = kq->raw(numel(vs), rng);
      kq->upload(kp_t, ks, kpv);
      kq->upload(vp_t, vs, vpv);
    } else {
      kpv = util::quantize(testing::random_values(numel(ks), rng), c.dtype);
      vpv = util::quantize(testing::random_values(numel(vs), rng), c.dtype);
      kp_t.allocate(c.dtype, ks);
      vp_t.allocate(c.dtype, vs);
      kp_t.upload_floats(kpv);
      vp_t.upload_floats(vpv);
    }
    a.key_shared_prefix = kp_t.view;
    a.value_shared_prefix = vp_t.view;
    if (c.prefix_len >= 0) {
      plen_t.allocate(DType::kInt64, {1});
      plen_t.upload_pod(std::vector<int64_t>{c.prefix_len});
      a.actual_shared_prefix_len = plen_t.view;
    }
  }
  if (c.quant) {  // scales that spread the outputs (|x| < ~4) over the int8 range, offsets of a few units
    const std::vector<int64_t> qsh = c.quant == 1 ? std::vector<int64_t>{1}
                                     : c.layout == "BSH" ? std::vector<int64_t>{1, 1, N * DV}
                                                         : std::vector<int64_t>{N, DV};
    const size_t n = numel(qsh);
    const DType sd = c.quant_bf16 ? DType::kBFloat16 : DType::kFloat32;
    for (size_t i = 0; i < n; ++i) qsv.push_back(10.0f + float(rng() % 1500) / 100.0f);
    for (size_t i = 0; i < n; ++i) qov.push_back(float(int(rng() % 2001) - 1000) / 100.0f);
    qsv = util::quantize(qsv, sd);
    qov = util::quantize(qov, sd);
    qs_t.allocate(sd, qsh);
    qs_t.upload_floats(qsv);
    a.quant_scale2 = qs_t.view;
    if (c.quant_offset) {
      qo_t.allocate(sd, qsh);
      qo_t.upload_floats(qov);
      a.quant_offset2 = qo_t.view;
    }
  }
  if (kq) kq->bind(a);
  if (i8) i8->bind(a, ds1_t, qs1_t, ds2_t);
  DeviceTensor bt(DType::kInt32, {B, std::max(max_blocks, 1)});
  if (paged) {
    bt.upload_pod(table);
    a.block_table = bt.view;
    a.block_size = bs;
  }
  // Masks: 1 = masked out. Full masks are random with some fully masked rows.
  const int mcols = (kv_cols + 31) / 32 * 32;  // the seed allows rounding up
  std::vector<uint8_t> mask_host;
  std::vector<int64_t> mshape;
  int mask_b = 1, mask_rows = 1;
  if (c.mask == 1 && decode) {
    mask_b = B;
    mshape = c.mask_shape % 3 == 0 ? std::vector<int64_t>{B, mcols}
             : c.mask_shape % 3 == 1 ? std::vector<int64_t>{B, 1, mcols}
                                      : std::vector<int64_t>{B, 1, 1, mcols};
  } else if (c.mask == 1) {
    mask_rows = QS;
    switch (c.mask_shape % 5) {
      case 0: mshape = {QS, mcols}; break;
      case 1: mshape = {B, QS, mcols}, mask_b = B; break;
      case 2: mshape = {1, QS, mcols}; break;
      case 3: mshape = {B, 1, QS, mcols}, mask_b = B; break;
      default: mshape = {1, 1, QS, mcols}; break;
    }
  } else if (c.mask == 2) {
    mshape = c.mask_shape % 3 == 0 ? std::vector<int64_t>{2048, 2048}
             : c.mask_shape % 3 == 1 ? std::vector<int64_t>{1, 2048, 2048}
                                      : std::vector<int64_t>{1, 1, 2048, 2048};
  }
  DeviceTensor mask_t;
  if (c.mask) {
    mask_host.assign(numel(mshape), 0);
    if (c.mask == 2) {
      std::fill(mask_host.begin(), mask_host.end(), 1);  // never read: all-masked content would show
    } else {
      const int full_row = int(rng() % std::max(1, mask_rows));
      for (size_t i = 0; i < mask_host.size(); ++i) mask_host[i] = rng() % 10 < 3;
      for (int mb = 0; mb < mask_b; ++mb)  // one fully masked row per batch: 0 out, LSE +inf
        for (int j = 0; j < mcols; ++j) mask_host[(size_t(mb) * mask_rows + full_row) * mcols + j] = 1;
    }
    mask_t.allocate(rng() % 2 ? DType::kUInt8 : DType::kInt8, mshape);
    mask_t.upload_pod(mask_host);
    a.atten_mask = mask_t.view;
  }
  // pse: (B or 1, N, Q_S', KV_S'), padded a little past the minimum.
  const int pse_rows = decode ? 1 : QS + 3, pse_cols = kv_cols + 5;
  std::vector<float> pse_host;
  DeviceTensor pse_t;
  if (c.pse) {
    const int pb = c.pse == 1 ? B : 1;
    pse_host = util::quantize(testing::random_values(size_t(pb) * N * pse_rows * pse_cols, rng, 2.0f), c.dtype);
    // The kernel needs 16-byte rows only for Q/K/V; pse is read per element.
    pse_t.allocate(c.dtype, {pb, N, pse_rows, pse_cols});
    pse_t.upload_floats(pse_host);
    a.pse_shift = pse_t.view;
  }

  // The decode kernel folds K's channel (or tensor) scales into its fp16 query, so
  // the operand its QK MMA reads is fp16(q * s), rounded once (2^-11 relative). With
  // scales spread over 2^+-12 the logits reach the thousands, and that rounding alone
  // moves near-tied softmax weights by percents: the reference reads the same operand.
  bool folds_k_scale = false;
  if (!c.kernel.empty() || c.expect_pass >= 0 || c.kv_pair >= 0 || (kq && decode)) {
    const char* arch = testing::gpu_test_prewarm_arch();
    spec::Arch on;
    if (arch) on = spec::Arch::parse(arch);
    else {
      const driver::DeviceCaps& caps = driver::device_caps(driver::current_device());
      on = spec::arch_for_device(caps.sm_major, caps.sm_minor);
    }
    const std::vector<spec::KernelSpec> specs = ops::fia_prewarm_specs(a, on);
    const std::string name = specs.back().name();
    folds_k_scale = kq && name.rfind("decode.", 0) == 0 && !specs.back().has(spec::feature::kKTokenScale);
    if (!c.kernel.empty()) EXPECT_EQ(name.rfind(c.kernel, 0), 0u) << describe(c) << ": launches " << name;
    if (c.kv_pair >= 0)
      EXPECT_EQ(specs.back().has(spec::feature::kKvPair), c.kv_pair == 1) << describe(c) << ": launches " << name;
    if (c.expect_pass >= 0)
      EXPECT_EQ(specs.size() == 2 && specs[0].has(spec::feature::kDequantPass), c.expect_pass == 1)
          << describe(c) << ": launches " << name;
  }
  if (const char* arch = testing::gpu_test_prewarm_arch()) {
    prewarm_fused_infer_attention_score(a, arch);
    return 0.0;
  }
  if (c.capture) {
    // The first call grows the stream's tables; the captured one must replay the
    // lengths it was captured with (the decode path's memsets, the prefill Params).
    CUstream st = driver::stream_create();
    fused_infer_attention_score(a, st);
    driver::stream_sync(st);
    out.poison();
    driver::begin_capture(st);
    fused_infer_attention_score(a, st);
    driver::CapturedGraph graph = driver::end_capture(st);
    const auto untouched = out.download_floats();
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float x) { return std::isnan(x); }))
        << describe(c) << ": capturing ran the kernel";
    graph.launch(st);
    driver::stream_sync(st);
    driver::stream_destroy(st);
  } else {
    fused_infer_attention_score(a);
  }
  driver::ctx_sync();

  testing::FiaRefProblem pr;
  pr.batch = B;
  pr.num_heads = N;
  pr.num_kv_heads = KN;
  pr.head_dim = D;
  pr.head_dim_v = DV;
  pr.q_lens = ql;
  pr.kv_lens = kl;
  for (int b = 0; b < B; ++b) pr.kv_lens[size_t(b)] = fits[b] ? P + kl[b] : 0;
  pr.decode = decode;
  pr.sparse_mode = c.sparse;
  pr.pre_tokens = c.pre;
  pr.next_tokens = c.next;
  if ((qpad_on || kvpad_on) && c.sparse == 0) pr.pre_tokens = pr.next_tokens = 2147483647;  // ignored (the seed)
  pr.scale = a.scale;
  pr.q = [&](int b, int s, int h, int d) { return double(qv[qidx(b, qoff[b] + s, h, d)]) * (i8 ? i8->ds1 : 1.0); };
  if (folds_k_scale)
    pr.q = [&](int b, int s, int h, int d) {
      const double x = qv[qidx(b, qoff[b] + s, h, d)];
      const double sk = kq->scale(false, KvQuantAt{b, h / G, 0, 0, 0, d});
      return double(util::quantize({float(x) * float(sk)}, DType::kFloat16)[0]) / sk;
    };
  // Quantised K/V: the scale position is the physical token (contiguous) or the logical
  // one (paged); prefix tokens take position 0 (the plan allows only scales that ignore it).
  auto kv_at = [&](int b, int j, int hk, int d) {
    const int own = j - P, pos = j < P ? 0 : paged ? own : kvoff[b] + own;
    const int blk = paged && j >= P ? table[size_t(b) * max_blocks + own / bs] : 0;
    return KvQuantAt{b, hk, pos, blk, paged && j >= P ? own % bs : 0, d};
  };
  pr.k = [&](int b, int j, int hk, int d) {
    const double x = j < P ? kpv[pidx(j, hk, d, D)] : kv[kvidx(b, kvoff[b] + j - P, hk, d, D)];
    return kq ? kq->dequant(false, kv_at(b, j, hk, d), x) : x;
  };
  pr.v = [&](int b, int j, int hk, int d) {
    const double x = j < P ? vpv[pidx(j, hk, d, DV)] : vv[kvidx(b, kvoff[b] + j - P, hk, d, DV)];
    return kq ? kq->dequant(true, kv_at(b, j, hk, d), x) : i8 ? x * i8->qs1 * i8->ds2 : x;
  };
  if (c.pse)
    pr.pse = [&](int b, int h, int i, int j) {
      const size_t pb = c.pse == 1 ? size_t(b) : 0;
      return double(pse_host[((pb * N + h) * pse_rows + i) * pse_cols + j]);
    };
  if (c.mask == 1)
    pr.masked = [&](int b, int i, int j) {
      const size_t mb = mask_b == 1 ? 0 : size_t(b);
      return mask_host[(mb * mask_rows + (decode ? 0 : i)) * mcols + j] != 0;
    };
  if (c.mask == 2) pr.masked = [](int, int, int) { return true; };  // modes 2-4 never consult it
  const auto ref = testing::reference_fia(pr);

  std::vector<float> got;
  if (c.quant) {
    for (uint8_t x : out.download()) got.push_back(float(int8_t(x)));
  } else {
    got = out.download_floats();
  }
  const auto got_lse = c.lse ? lse.download_floats() : std::vector<float>{};
  std::vector<double> g, r, gl, rl;
  int bad_pad = 0, bad_inf = 0;
  std::vector<size_t> gi;  // int8 output: each checked element's output index
  for (int b = 0; b < B; ++b) {
    const int rows = tnd ? ql[b] : QS;
    for (int ps = 0; ps < rows; ++ps)
      for (int h = 0; h < N; ++h) {
        const int s = ps - qoff[b];  // the logical row (left padding: outside the window is not real)
        const bool real = s >= 0 && s < ql[b];
        for (int dv = 0; dv < DV; ++dv) {
          const float x = got[oidx(b, ps, h, dv)];
          if (!real) {
            bad_pad += x != 0.0f;  // rows past the actual length: exactly 0 (NaN counts too)
            continue;
          }
          g.push_back(x);
          r.push_back(ref.out[ref.out_index(b, s, h, dv, N, DV)]);
          const bool no_key = std::isinf(ref.lse[ref.lse_index(b, s, h, N)]);
          gi.push_back(no_key ? SIZE_MAX : size_t(h) * DV + dv);
          if (c.quant && no_key) bad_pad += x != 0.0f;  // a row that sees no key writes 0, not the offset
        }
        if (c.lse) {
          const float x = got_lse[lidx(b, ps, h)];
          const double want = real ? ref.lse[ref.lse_index(b, s, h, N)] : INFINITY;
          if (std::isinf(want)) {
            bad_inf += !(std::isinf(x) && x > 0);
          } else {
            gl.push_back(x);
            rl.push_back(want);
          }
        }
      }
  }
  EXPECT_EQ(bad_pad, 0) << describe(c) << ": output elements past the actual length not 0";
  EXPECT_EQ(bad_inf, 0) << describe(c) << ": LSE of rows that see no key (or lie past their length) not +inf";
  const double tol = 1e-2;
  if (c.quant) {
    // Within a unit of round(x * scale + offset) (clamped), the float tolerance scaled in.
    const double rr = testing::rms(r);
    size_t off = 0;
    std::string rep;
    for (size_t i = 0; i < g.size(); ++i) {
      if (gi[i] == SIZE_MAX) continue;  // checked for 0 above
      const size_t ch = c.quant == 2 ? gi[i] : 0;
      const double sc = qsv[ch], o = c.quant_offset ? qov[ch] : 0.0, e = 3 * tol * rr * sc + 0.5;
      const double y = r[i] * sc + o;
      const double lo = testing::fia_int8_out(r[i] - e / sc, sc, o), hi = testing::fia_int8_out(r[i] + e / sc, sc, o);
      if (g[i] < lo || g[i] > hi) {
        if (off++ < 8) rep += "  got " + std::to_string(g[i]) + " want " + std::to_string(y) + "\n";
      }
    }
    EXPECT_EQ(off, 0u) << describe(c) << ": " << off << " of " << g.size() << " int8 elements outside:\n" << rep;
  } else {
    std::string report;
    const size_t outside = testing::count_outside_bound(g, r, 5 * tol * testing::rms(r), tol, &report);
    EXPECT_EQ(outside, 0u) << describe(c) << ": " << outside << " of " << r.size() << " elements outside:\n" << report;
  }
  if (c.lse) {
    std::string lr;
    const size_t lo = testing::count_outside_bound(gl, rl, 2e-3, 1e-3, &lr);
    EXPECT_EQ(lo, 0u) << describe(c) << ": " << lo << " of " << rl.size() << " LSE values outside:\n" << lr;
  }
  return r.empty() || c.quant ? 0.0 : testing::rel_l2(g, r);
}

// Whether the GPU (or, in prewarm mode, the target arch) is sm_90a: the wgmma kernel's.
inline bool hopper_here() {
  if (const char* arch = testing::gpu_test_prewarm_arch()) return std::string(arch) == "sm_90a";
  const driver::DeviceCaps& caps = driver::device_caps(driver::current_device());
  return caps.sm_major == 9 && caps.sm_minor == 0;
}

// Runs the case on the portable kernel and, on sm_90a where its head dims allow,
// on the wgmma (trtllm-gen) kernel; returns the larger error.
inline double run_fia(FiaCase c, uint32_t seed) {
  if (!c.kernel.empty()) return run_fia_on(c, seed);  // checks which kernel auto launches: auto only
  c.backend = Backend::kXqa;
  double err = run_fia_on(c, seed);
  // The wgmma kernel's head dims; hd 256 with both a mask tensor and pse stays portable (can_implement).
  // Quantised K/V: the wgmma kernel's producer dequantises int8 to fp16 only, up to head
  // dim 192 (its raw slots and two stages fit shared memory there; can_implement).
  // Dequantised first (dqpass), the attention reads 16-bit copies: any dtype and head dim.
  const bool quant_ok = !c.kvq.bits || c.expect_pass == 1 || c.int8_qkv ||
                        (c.kvq.bits == 8 && c.dtype == DType::kFloat16 && std::max(c.head_dim, c.head_dim_v) <= 192);
  const bool hopper_serves = quant_ok && c.head_dim % 64 == 0 && c.head_dim_v % 64 == 0 && c.head_dim <= 256 &&
                             c.head_dim_v <= 256 && !(c.head_dim_v > 192 && c.mask == 1 && c.pse);
  if (hopper_here() && hopper_serves) {
    c.backend = Backend::kTrtllmGen;
    err = std::max(err, run_fia_on(c, seed));
  }
  return err;
}

}  // namespace attnjit::fia_gpu
