// The xqa GPU tests' case, its float64 check and tolerance, shared by
// xqa_gpu_test.cpp and xqa_window_gpu_test.cpp. Outputs start as NaN; every
// element is checked.
#pragma once


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

namespace attnjit::xqa_gpu {

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
  int spare_pages = 1;  // page-table columns past the longest request: max_seq_len plans the splits
};

inline std::string describe(const XqaCase& c) {
  std::string s = std::string(dtype_name(c.dtype)) + "/kv " + dtype_name(c.kv_dtype) + "/o " +
                  dtype_name(c.out_dtype) + " hd" + std::to_string(c.head_dim) + " g" + std::to_string(c.group) +
                  " p" + std::to_string(c.page_size) + (c.layout == KvLayout::kNHD ? " NHD" : " HND") + " lens";
  for (int l : c.seq_lens) s += " " + std::to_string(l);
  s += c.sinks ? " sinks" : "";
  s += c.window ? " win" + std::to_string(c.window) : "";
  s += c.scale_ptrs ? " scaleptr" : "";
  s += " sm" + std::to_string(c.sm_count) + " qlen" + std::to_string(c.q_seq_len) + (c.ragged ? " ragged" : "") +
       " mask" + std::to_string(c.mask_kind) + " spare" + std::to_string(c.spare_pages);
  return s;
}

inline double tolerance(const XqaCase& c) { return dtype_size(c.kv_dtype) == 1 ? 4e-2 : 1e-2; }

// kernel_name, when given, receives the name of the kernel the call ran (prewarm_xqa's answer).
inline double run_xqa(const XqaCase& c, uint32_t seed, std::string* kernel_name = nullptr) {
  std::mt19937 rng(seed);
  const int B = c.batch, KH = c.num_kv_heads, G = c.group, H = KH * G, D = c.head_dim, P = c.page_size;
  const bool nhd = c.layout == KvLayout::kNHD, fp8 = dtype_size(c.kv_dtype) == 1;
  const int max_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const int pages_per_seq = (max_len + P - 1) / P + c.spare_pages;  // max_seq_len > longest
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
    const std::string name = prewarm_xqa(a, arch);
    if (kernel_name) *kernel_name = name;
    return 0.0;
  }
  if (kernel_name) *kernel_name = prewarm_xqa(a);  // loaded already: names it, compiles nothing
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

}  // namespace attnjit::xqa_gpu
