// xqa (paged GQA decode, spec decode) on the GPU against the float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>

#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "common/attention_reference.hpp"
#include "common/device_tensor.hpp"
#include "gpu_test_env.hpp"

namespace attnjit {
namespace {

using testing::DeviceTensor;

struct XqaCase {
  DType dtype = DType::kBFloat16;
  DType kv_dtype = DType::kBFloat16;
  DType out_dtype = DType::kBFloat16;
  int head_dim = 128, group = 8, num_kv_heads = 2, page_size = 32, batch = 3;
  std::vector<int> seq_lens = {1, 100, 1000};
  KvLayout layout = KvLayout::kNHD;
  bool sinks = false;
  int window = 0;
  bool scale_ptrs = false;
  float q_scale = 1.f, kv_scale = 1.f, rcp_out_scale = 1.f;
  int sm_count = 0;  // 0: device's (multi-block on); 1: forces one split
  int q_seq_len = 1;
  bool ragged = false;
  int mask_kind = 0;  // spec decode: 0 causal, 1 random
};

std::string describe(const XqaCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + "/kv " + dtype_name(c.kv_dtype) + "/o " +
                  dtype_name(c.out_dtype) + " hd" + std::to_string(c.head_dim) + " g" + std::to_string(c.group) +
                  " p" + std::to_string(c.page_size) + (c.layout == KvLayout::kNHD ? " NHD" : " HND") + " lens";
  for (int l : c.seq_lens) s += " " + std::to_string(l);
  s += c.sinks ? " sinks" : "";
  s += c.window ? " win" + std::to_string(c.window) : "";
  s += c.scale_ptrs ? " scaleptr" : "";
  s += " sm" + std::to_string(c.sm_count) + " qlen" + std::to_string(c.q_seq_len) + (c.ragged ? " ragged" : "") +
       " mask" + std::to_string(c.mask_kind);
  return s;
}

double tolerance(const XqaCase& c) { return dtype_size(c.kv_dtype) == 1 ? 4e-2 : 1e-2; }

double run_xqa(const XqaCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int B = c.batch, KH = c.num_kv_heads, G = c.group, H = KH * G, D = c.head_dim, P = c.page_size;
  const bool nhd = c.layout == KvLayout::kNHD, fp8 = dtype_size(c.kv_dtype) == 1;
  const int max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const int pages_per_seq = (max_len + P - 1) / P + 1;  // one spare page: max_seq_len > longest
  const int num_pages = B * pages_per_seq;
  std::vector<int> page_ids(num_pages);
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);

  // Query lengths per request (ragged drafts when asked).
  std::vector<int> q_lens(B, c.q_seq_len);
  if (c.ragged)
    for (int b = 0; b < B; ++b) q_lens[b] = 1 + int(rng() % c.q_seq_len);
  std::vector<uint32_t> cu(B + 1, 0);
  for (int b = 0; b < B; ++b) cu[b + 1] = cu[b] + q_lens[b];
  const int total_q = int(cu[B]);
  for (int b = 0; b < B; ++b)
    if (c.seq_lens[b] < q_lens[b]) q_lens[b] = c.seq_lens[b];  // guarded by the case tables

  std::vector<int64_t> qshape;
  if (c.ragged) qshape = {total_q, H, D};
  else if (c.q_seq_len > 1) qshape = {B, 1, c.q_seq_len, H, D};
  else qshape = {B, 1, H, D};
  size_t q_elems = 1;
  for (auto s : qshape) q_elems *= size_t(s);
  auto qv = util::quantize(testing::random_values(q_elems, rng), c.dtype);
  std::vector<int64_t> kshape = nhd ? std::vector<int64_t>{num_pages, P, KH, D} : std::vector<int64_t>{num_pages, KH, P, D};
  const size_t kv_elems = size_t(num_pages) * P * KH * D;
  auto kvals = util::quantize(testing::random_values(kv_elems, rng, fp8 ? 2.f : 1.f), c.kv_dtype);
  auto vvals = util::quantize(testing::random_values(kv_elems, rng, fp8 ? 2.f : 1.f), c.kv_dtype);

  DeviceTensor q(c.dtype, qshape), out(c.out_dtype, qshape), k(c.kv_dtype, kshape), v(c.kv_dtype, kshape);
  q.upload_floats(qv);
  k.upload_floats(kvals);
  v.upload_floats(vvals);
  out.poison();
  DeviceTensor pt(DType::kInt32, {B, pages_per_seq}), sl(DType::kUInt32, {B, 1});
  std::vector<int> pt_host(page_ids.begin(), page_ids.end());
  pt.upload_pod(pt_host);
  std::vector<uint32_t> sl_host(c.seq_lens.begin(), c.seq_lens.end());
  sl.upload_pod(sl_host);

  const int sm = c.sm_count ? c.sm_count
                 : testing::gpu_test_prewarm_arch() ? 132
                                                    : driver::device_info(driver::current_device()).sm_count;
  DeviceTensor ws(DType::kUInt8, {int64_t(std::max<size_t>(16, xqa_workspace_bytes(B, KH, G, c.q_seq_len, D, pages_per_seq * P, sm)))});
  DeviceTensor sem(DType::kUInt32, {int64_t(xqa_semaphore_count(B, KH, G, c.q_seq_len))});
  sem.zero();

  XqaArgs a;
  a.q = q.view;
  a.k_cache = k.view;
  a.v_cache = v.view;
  a.page_table = pt.view;
  a.seq_lens = sl.view;
  a.output = out.view;
  a.workspace_buffer = ws.view;
  a.semaphores = sem.view;
  a.num_kv_heads = KH;
  a.page_size = P;
  a.kv_layout = c.layout;
  a.sliding_win_size = c.window;
  a.rcp_out_scale = c.rcp_out_scale;
  if (c.sm_count) a.sm_count = c.sm_count;
  DeviceTensor sinks_t(DType::kFloat32, {KH, G});
  std::vector<float> sinks_host(H);
  if (c.sinks) {
    for (auto& s : sinks_host) s = std::normal_distribution<float>(1.0f, 2.0f)(rng);
    sinks_t.upload_pod(sinks_host);
    a.sinks = sinks_t.view;
  }
  DeviceTensor scales(DType::kFloat32, {2});
  if (c.scale_ptrs) {
    scales.upload_pod(std::vector<float>{c.q_scale, c.kv_scale});
    // Prewarm mode has no device memory; any non-null pointer selects the same kernel.
    const float* base = testing::gpu_test_prewarm_arch() ? reinterpret_cast<const float*>(uintptr_t{256})
                                                         : static_cast<const float*>(scales.view.data);
    a.q_scale = base;
    a.kv_scale = base + 1;
  } else {
    a.q_scale = c.q_scale;
    a.kv_scale = c.kv_scale;
  }
  // Spec-decode mask: uint16 [B, q_seq_len, words * 2], bit j of row t = draft token j
  // visible; ragged drafts pack rows by query token, [total_q, words * 2] (XQA's layout).
  const int words = (c.q_seq_len + 31) / 32;
  auto mask_row = [&](int b, int t) -> size_t { return (c.ragged ? size_t(cu[b]) + t : size_t(b) * c.q_seq_len + t) * words; };
  const size_t mask_rows = c.ragged ? size_t(total_q) : size_t(B) * c.q_seq_len;
  std::vector<uint32_t> mask_words(mask_rows * words, 0);
  DeviceTensor mask = c.ragged ? DeviceTensor(DType::kUInt16, {total_q, words * 2})
                               : DeviceTensor(DType::kUInt16, {B, c.q_seq_len, words * 2});
  if (c.q_seq_len > 1 || c.ragged) {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < (c.ragged ? q_lens[b] : c.q_seq_len); ++t)
        for (int j = 0; j < c.q_seq_len; ++j) {
          bool vis = c.mask_kind == 0 ? j <= t : (j == t || rng() % 2);
          if (vis) mask_words[mask_row(b, t) + j / 32] |= 1u << (j % 32);
        }
    mask.upload_pod(mask_words);
    a.mask = mask.view;
    a.q_seq_len = c.q_seq_len;
  }
  DeviceTensor cu_t(DType::kUInt32, {B + 1});
  if (c.ragged) {
    cu_t.upload_pod(cu);
    a.q_cu_seq_lens = cu_t.view;
  }
  if (const char* arch = testing::gpu_test_prewarm_arch()) {
    prewarm_xqa(a, arch);
    return 0.0;
  }
  xqa(a);
  driver::ctx_sync();
  // Run twice: the semaphores must have reset themselves.
  out.poison();
  xqa(a);
  driver::ctx_sync();

  testing::RefProblem pr;
  pr.batch = B;
  pr.num_kv_heads = KH;
  pr.group = G;
  pr.head_dim = D;
  pr.seq_lens = c.seq_lens;
  pr.q_lens = q_lens;
  auto qidx = [&](int b, int t, int h, int d) -> size_t {
    if (c.ragged) return ((size_t(cu[b]) + t) * H + h) * D + d;
    return ((size_t(b) * c.q_seq_len + t) * H + h) * D + d;
  };
  auto kidx = [&](int b, int j, int h, int d) -> size_t {
    size_t page = size_t(pt_host[size_t(b) * pages_per_seq + j / P]);
    int off = j % P;
    return nhd ? ((page * P + off) * KH + h) * D + d : ((page * KH + h) * P + off) * D + d;
  };
  pr.q = [&](int b, int t, int h, int d) { return double(qv[qidx(b, t, h, d)]); };
  pr.k = [&](int b, int j, int h, int d) { return double(kvals[kidx(b, j, h, d)]); };
  pr.v = [&](int b, int j, int h, int d) { return double(vvals[kidx(b, j, h, d)]); };
  pr.sm_scale = 1.0 / std::sqrt(double(D));
  pr.q_scale = c.q_scale;
  pr.k_scale = pr.v_scale = fp8 ? c.kv_scale : 1.f;  // FlashInfer's XQA: kv_scale dequantizes fp8 KV only
  pr.window_left = c.window > 0 ? c.window - 1 : -1;
  if (c.sinks) pr.sinks.assign(sinks_host.begin(), sinks_host.end());
  if (c.q_seq_len > 1 || c.ragged)
    pr.custom_mask = [&](int b, int t, int j) {
      return ((mask_words[mask_row(b, t) + j / 32] >> (j % 32)) & 1u) != 0;
    };
  auto ref = testing::reference_decode(pr);

  auto got = out.download_floats();
  std::vector<double> g, r;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < q_lens[b]; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          float x = got[qidx(b, t, h, d)];
          if (std::isnan(x)) {
            ADD_FAILURE() << describe(c) << ": NaN at b" << b << " t" << t << " h" << h << " d" << d;
            return 1e9;
          }
          g.push_back(double(x) / (c.out_dtype == DType::kFloat8E4M3 ? c.rcp_out_scale : 1.0));
          r.push_back(ref.out[ref.index(b, t, h, d, H, D)]);
        }
  // Each element too, not only the L2 of the whole output.
  const double tol = tolerance(c);
  std::string report;
  const size_t outside = testing::count_outside_bound(g, r, 5 * tol * testing::rms(r),
                                                      c.out_dtype == DType::kFloat8E4M3 ? 0.0625 + tol : tol, &report);
  EXPECT_EQ(outside, 0u) << describe(c) << ": " << outside << " of " << r.size() << " elements outside the bound:\n"
                         << report;
  return testing::rel_l2(g, r);
}

TEST(XqaGpu, Basic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  XqaCase c;
  EXPECT_LE(run_xqa(c, 1), tolerance(c)) << describe(c);
}

TEST(XqaGpu, RandomizedSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(777);
  const int hds[] = {64, 128, 256};
  const int groups[] = {1, 2, 4, 5, 8, 16, 64};
  const int pages[] = {16, 32, 64, 128};
  int n = 0;
  for (int hd : hds)
    for (int g : groups)
      for (int p : pages) {
        XqaCase c;
        c.dtype = rng() % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.kv_dtype = rng() % 3 == 0 ? DType::kFloat8E4M3 : c.dtype;
        c.out_dtype = (c.kv_dtype == DType::kFloat8E4M3 && rng() % 3 == 0) ? DType::kFloat8E4M3 : c.dtype;
        if (c.out_dtype == DType::kFloat8E4M3) c.rcp_out_scale = 4.0f;
        c.head_dim = hd;
        c.group = g;
        c.page_size = p;
        c.num_kv_heads = g >= 16 ? 1 : 2;
        c.layout = rng() % 2 ? KvLayout::kNHD : KvLayout::kHND;
        c.batch = 3;
        c.seq_lens = {1 + int(rng() % 40), 1 + int(rng() % 700), 1 + int(rng() % 3000)};
        c.sm_count = rng() % 3 == 0 ? 1 : 0;
        if (c.kv_dtype == DType::kFloat8E4M3) c.kv_scale = 0.75f;
        double err = run_xqa(c, 5000 + n++);
        EXPECT_LE(err, tolerance(c)) << describe(c);
      }
}

TEST(XqaGpu, SinksWindowsScalesAndSplits) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (DType kvd : {DType::kBFloat16, DType::kFloat8E4M3}) {
    XqaCase b;
    b.kv_dtype = kvd;
    b.seq_lens = {1, 37, 5000};
    XqaCase c = b;
    c.sinks = true;
    cases.push_back(c);
    c = b;
    c.window = 100;  // shorter than most sequences
    cases.push_back(c);
    c = b;
    c.window = 9000;  // longer than every sequence
    c.sinks = true;
    cases.push_back(c);
    c = b;
    c.scale_ptrs = true;
    c.q_scale = 0.5f;
    c.kv_scale = 1.25f;
    cases.push_back(c);
    c = b;
    c.sm_count = 1;  // multi-block off
    cases.push_back(c);
    c = b;
    c.batch = 1;
    c.seq_lens = {32768};  // multi-block on: many splits
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 7000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

TEST(XqaGpu, SpeculativeDecoding) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (int qlen : {2, 4, 7})
    for (int mk : {0, 1})
      for (bool ragged : {false, true}) {
        XqaCase c;
        c.q_seq_len = qlen;
        c.mask_kind = mk;
        c.ragged = ragged;
        c.group = qlen == 7 ? 4 : 8;
        c.seq_lens = {qlen + 3, 300, 2000};
        cases.push_back(c);
      }
  {
    XqaCase c;  // spec decode with sinks, a window and fp8 KV together
    c.q_seq_len = 4;
    c.mask_kind = 1;
    c.sinks = true;
    c.window = 64;
    c.kv_dtype = DType::kFloat8E4M3;
    c.kv_scale = 0.5f;
    c.seq_lens = {7, 300, 2000};
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 9000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Issue 9 item 5: speculative decoding with more than 16 query rows per (request,
// KV head) holds 64 rows per CTA (split-M, templates/decode/decode_split_m.cuh): 16
// rows per warp over one CTA-wide ring, and the split merge over four 16-row blocks.
// Rows 24, 32, 48 (warps without rows), 64, 96 and 128 (two 64-row CTAs, the second
// partly valid); group x q_seq_len <= 16 (the token split) beside them; uniform and
// ragged drafts, random masks, groups 4/8/16, NHD/HND, bf16 and fp8 KV (fp8 output
// too), sinks, windows, head dims 64/128/256, one split and many.
TEST(XqaGpu, SpeculativeDecodingSixtyFourRowsPerCta) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  const int groups[] = {4, 8, 16};
  int i = 0;
  for (int qlen : {3, 4, 6, 8})
    for (int group : groups)
      for (bool ragged : {false, true}) {
        XqaCase c;
        c.q_seq_len = qlen;
        c.group = group;
        c.ragged = ragged;
        c.mask_kind = 1;
        c.batch = 3;
        c.seq_lens = {qlen + 2, 700 + qlen, 9000 + 17 * qlen};  // a lone draft, one split, several
        c.layout = i % 2 ? KvLayout::kHND : KvLayout::kNHD;
        c.kv_dtype = i % 3 == 1 ? DType::kFloat8E4M3 : DType::kBFloat16;
        if (dtype_size(c.kv_dtype) == 1) c.kv_scale = 0.5f;
        c.sm_count = i % 4 == 3 ? 1 : 0;  // 1: one split (straight to the output); 0: many
        c.sinks = i % 5 == 2;
        c.window = i % 7 == 4 ? 333 : 0;
        c.page_size = i % 6 == 5 ? 64 : 32;
        ++i;
        cases.push_back(c);
      }
  for (int hd : {64, 256})
    for (int sm : {0, 1}) {
      XqaCase c;  // the other head dims: Q in registers (64), Q read from shared memory (256)
      c.head_dim = hd;
      c.q_seq_len = 5;
      c.group = 8;
      c.mask_kind = 1;
      c.sm_count = sm;
      c.seq_lens = {5, 2500, 12000};
      c.ragged = sm == 1;
      cases.push_back(c);
    }
  {
    XqaCase c;  // fp8 KV and fp8 output, sinks, window, page 128, group 16 x 8 drafts (two CTAs)
    c.kv_dtype = DType::kFloat8E4M3;
    c.out_dtype = DType::kFloat8E4M3;
    c.kv_scale = 0.5f;
    c.rcp_out_scale = 2.f;
    c.group = 16;
    c.q_seq_len = 8;
    c.page_size = 128;
    c.sinks = true;
    c.window = 1000;
    c.mask_kind = 1;
    c.seq_lens = {9, 5000, 30000};
    cases.push_back(c);
  }
  {
    XqaCase c;  // q_seq_len 2 at group 16: 32 rows
    c.group = 16;
    c.q_seq_len = 2;
    c.mask_kind = 0;
    c.seq_lens = {3, 4000};
    c.batch = 2;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 13000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// ATTNJIT_DECODE_SPLIT_M=0 (the A/B knob) renders and launches the 16-row kernel;
// both stay correct.
TEST(XqaGpu, SpeculativeDecodingWithSplitMOff) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  const char* old = std::getenv("ATTNJIT_DECODE_SPLIT_M");
  const std::string saved = old ? old : "";
  setenv("ATTNJIT_DECODE_SPLIT_M", "0", 1);
  for (bool ragged : {false, true}) {
    XqaCase c;
    c.q_seq_len = 6;
    c.group = 8;
    c.ragged = ragged;
    c.mask_kind = 1;
    c.seq_lens = {7, 3000, 10000};
    double err = run_xqa(c, 15000 + int(ragged));
    EXPECT_LE(err, tolerance(c)) << describe(c) << " split-M off";
  }
  if (old) setenv("ATTNJIT_DECODE_SPLIT_M", saved.c_str(), 1);
  else unsetenv("ATTNJIT_DECODE_SPLIT_M");
}

// Issue 9: a window on sequences much longer than it. The splits are planned over
// the visible span (window + q_seq_len), so these exercise many splits starting
// at kv_begin, windows that cut pages, sinks and spec decode's union of windows.
TEST(XqaGpu, WindowOnLongSequences) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (int window : {1, 33, 1000, 4096})
    for (int sm : {0, 1}) {
      XqaCase c;
      c.batch = 4;
      c.seq_lens = {window, 8192 + 5, 40000 + 17, 3};  // one at the window, one shorter
      c.window = window;
      c.sm_count = sm;  // 0: many splits over the window; 1: one split
      c.sinks = window != 33;
      cases.push_back(c);
    }
  for (int qlen : {2, 3, 4})
    for (bool ragged : {false, true}) {
      XqaCase c;  // spec decode: each row's window ends at its own position
      c.batch = 3;
      c.q_seq_len = qlen;
      c.ragged = ragged;
      c.mask_kind = qlen == 3 ? 0 : 1;
      c.sinks = true;
      c.window = 500 + qlen;
      c.seq_lens = {qlen + 1, 30000 + qlen, 9000};
      cases.push_back(c);
    }
  {
    XqaCase c;  // fp8 KV, HND, page 64, window not a multiple of the page
    c.kv_dtype = DType::kFloat8E4M3;
    c.kv_scale = 0.5f;
    c.layout = KvLayout::kHND;
    c.page_size = 64;
    c.window = 777;
    c.sinks = true;
    c.q_seq_len = 2;
    c.seq_lens = {50000, 2, 1500};
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 11000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Issue 9 item 1: sliding_win_size costs what the window holds. Each CTA reads the
// page ids of its own first tiles once the window has moved its start (the early
// ones belong to the plain split), the splits are planned over window + q_seq_len
// - 1 keys, and a start that is not a whole tile hands the last split up to a tile
// more. Covers: 128K sequences under a 4K window (aligned, and 5 / 17 keys off a
// tile), a 32K window on 128K, sinks, spec decode q_seq_len 3 ragged and 64-row
// (split-M) CTAs, fp8 KV (32-token tiles), HND, windows that cut pages and splits
// anywhere, a window as long as the sequence and longer, one split, and head_dim
// 256 and 512 (split-D's CTA ring).
TEST(XqaGpu, WindowCostsOnlyTheWindow) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  {
    XqaCase c;  // the bench's shape, with sinks: aligned, 5 keys off, a window-long and a short sequence
    c.batch = 4;
    c.seq_lens = {131072, 131072 + 5, 4096, 100};
    c.window = 4096;
    c.sinks = true;
    cases.push_back(c);
    c.kv_dtype = DType::kFloat8E4M3;  // 32-token tiles
    c.kv_scale = 0.5f;
    c.seq_lens = {131072 + 17, 65536 + 31, 4097, 32};
    cases.push_back(c);
    c.sm_count = 1;  // one split: the whole window in one CTA per head
    c.sinks = false;
    cases.push_back(c);
  }
  {
    XqaCase c;  // 32K window on 128K
    c.batch = 2;
    c.seq_lens = {131072 + 3, 32768};
    c.window = 32768;
    c.sinks = true;
    cases.push_back(c);
  }
  for (bool ragged : {false, true}) {
    XqaCase c;  // spec decode q_seq_len 3: the union of three windows, one start
    c.batch = 4;
    c.q_seq_len = 3;
    c.ragged = ragged;
    c.mask_kind = ragged ? 1 : 0;
    c.sinks = true;
    c.window = 1024;
    c.seq_lens = {65536 + 7, 30000 + 1, 1026, 3};
    cases.push_back(c);
  }
  {
    XqaCase c;  // 64 rows per CTA (group 16 x 4 drafts): split-M's CTA ring from the moved start
    c.group = 16;
    c.num_kv_heads = 1;
    c.q_seq_len = 4;
    c.ragged = true;
    c.mask_kind = 1;
    c.window = 2000;
    c.sinks = true;
    c.batch = 2;
    c.seq_lens = {70000 + 9, 2100};
    cases.push_back(c);
  }
  for (int page : {16, 64, 128}) {
    XqaCase c;  // windows that cut pages and splits at odd places; HND
    c.page_size = page;
    c.layout = page == 64 ? KvLayout::kHND : KvLayout::kNHD;
    c.window = page == 16 ? 4100 : 777;
    c.batch = 3;
    c.seq_lens = {50000 + page / 2 + 1, 9999, c.window + 1};
    cases.push_back(c);
  }
  for (int window : {5000, 5001, 1 << 20}) {
    XqaCase c;  // a window as long as the longest sequence, and longer: the plain plan
    c.batch = 2;
    c.seq_lens = {5000, 777};
    c.window = window;
    c.sinks = window == 5001;
    cases.push_back(c);
  }
  for (int hd : {256, 512}) {
    XqaCase c;  // split-D's CTA ring (512) and the widest token-split kernel (256)
    c.head_dim = hd;
    c.group = 8;
    c.num_kv_heads = 1;
    c.batch = 2;
    c.seq_lens = {65536 + 13, 3000};
    c.window = 3000;
    c.sinks = true;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 21000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Issue 9 item 4: head_dim 384 and 512, where the warps split the output dims over
// one CTA-wide ring (templates/decode/decode_split_d.cuh). Both KV dtypes, both
// layouts, pages 16 (16-token tiles) and 64 (32-token tiles), groups up to 16,
// sinks, windows (the start moved off the prefetched pages), fp8 output, scale
// pointers, ragged lengths, and one split as well as many (the split merge reuses
// the ring).
TEST(XqaGpu, HeadDimsPast256SplitTheOutputDims) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (int hd : {384, 512})
    for (DType kvd : {DType::kBFloat16, DType::kFloat8E4M3})
      for (int page : {16, 64}) {
        XqaCase c;
        c.head_dim = hd;
        c.kv_dtype = kvd;
        if (kvd == DType::kFloat8E4M3) c.kv_scale = 0.75f;
        c.page_size = page;
        c.layout = page == 16 ? KvLayout::kHND : KvLayout::kNHD;
        c.batch = 4;
        c.seq_lens = {1, 37, 1000 + hd / 16, 5000};  // ragged: a lone token, part of a tile, several splits
        cases.push_back(c);
        c.sinks = true;
        c.window = 300;
        c.layout = page == 16 ? KvLayout::kNHD : KvLayout::kHND;
        cases.push_back(c);
        c.sinks = false;
        c.window = 0;
        c.sm_count = 1;  // one split per request: the warp slices go straight to the output
        c.group = 16;
        c.num_kv_heads = 1;
        cases.push_back(c);
      }
  {
    XqaCase c;  // fp8 output and device scales at head_dim 512, group 1
    c.head_dim = 512;
    c.group = 1;
    c.num_kv_heads = 4;
    c.kv_dtype = DType::kFloat8E4M3;
    c.out_dtype = DType::kFloat8E4M3;
    c.rcp_out_scale = 4.0f;
    c.scale_ptrs = true;
    c.q_scale = 0.5f;
    c.kv_scale = 1.25f;
    c.seq_lens = {2049, 65, 3};
    cases.push_back(c);
  }
  {
    XqaCase c;  // batch 1, one long sequence: many splits, window with sinks
    c.head_dim = 512;
    c.dtype = c.kv_dtype = c.out_dtype = DType::kFloat16;
    c.batch = 1;
    c.seq_lens = {32768 + 5};
    c.window = 4096;
    c.sinks = true;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 15000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

}  // namespace
}  // namespace attnjit
