#include "bench_cases.hpp"
#include "bench_timing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "attnjit/decode.hpp"
#include "attnjit/xqa.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::bench {

namespace {

using testing::DeviceTensor;
}  // namespace

namespace {

// One xqa shape: B sequences of L tokens, window tokens of sliding window (0: none),
// 8 KV heads x group 8, pages of 32, head_dim D, QL query tokens per request
// (speculative decoding when > 1: a causal mask over the drafts).
Result time_xqa(int B, int L, int window, DType kv_dtype, const Options& o, std::mt19937& rng, int D = 128,
                int QL = 1) {
  const int KH = 8, G = 8, H = KH * G, P = 32;
  const int sm = driver::device_info(driver::current_device()).sm_count;
  {
    const int pps = (L + P - 1) / P, pages = B * pps;
    // Rotate sets by the KV a call reads (a window's span), so no case runs from L2.
    const int read_len = window > 0 ? std::min(L, window) : L;
    const double kv_bytes = 2.0 * B * read_len * KH * D * dtype_size(kv_dtype);
    const int sets = std::max(1, int(std::ceil(3 * kL2Bytes / kv_bytes)));
    struct Set {
      DeviceTensor q, k, v, out, pt, sl, ws, sem, mask;
    };
    const int words = (QL + 31) / 32;
    std::vector<uint16_t> mask_host(size_t(B) * QL * words * 2, 0);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < QL; ++t)
        for (int j = 0; j <= t; ++j) mask_host[(size_t(b) * QL + t) * words * 2 + j / 16] |= uint16_t(1u << (j % 16));
    const std::vector<int64_t> qshape = QL > 1 ? std::vector<int64_t>{B, 1, QL, H, D} : std::vector<int64_t>{B, 1, H, D};
    std::vector<Set> s(sets);
    for (auto& x : s) {
      x.q = DeviceTensor(DType::kBFloat16, qshape);
      x.out = DeviceTensor(DType::kBFloat16, qshape);
      x.k = DeviceTensor(kv_dtype, {pages, P, KH, D});
      x.v = DeviceTensor(kv_dtype, {pages, P, KH, D});
      x.q.upload(random_bytes(size_t(B) * QL * H * D, DType::kBFloat16, rng));
      if (QL > 1) {
        x.mask = DeviceTensor(DType::kUInt16, {B, QL, words * 2});
        x.mask.upload_pod(mask_host);
      }
      x.k.upload(random_bytes(size_t(pages) * P * KH * D, kv_dtype, rng));
      x.v.upload(random_bytes(size_t(pages) * P * KH * D, kv_dtype, rng));
      std::vector<int> ids(pages);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      x.pt = DeviceTensor(DType::kInt32, {B, pps});
      x.pt.upload_pod(ids);
      x.sl = DeviceTensor(DType::kUInt32, {B, 1});
      x.sl.upload_pod(std::vector<uint32_t>(B, uint32_t(L)));
      x.ws = DeviceTensor(DType::kUInt8, {int64_t(std::max<size_t>(16, xqa_workspace_bytes(B, KH, G, QL, D, pps * P, sm)))});
      x.sem = DeviceTensor(DType::kUInt32, {int64_t(xqa_semaphore_count(B, KH, G, QL))});
      x.sem.zero();
    }
    auto call = [&](int i) {
      XqaArgs a;
      a.q = s[i].q.view;
      a.k_cache = s[i].k.view;
      a.v_cache = s[i].v.view;
      a.page_table = s[i].pt.view;
      a.seq_lens = s[i].sl.view;
      a.output = s[i].out.view;
      a.workspace_buffer = s[i].ws.view;
      a.semaphores = s[i].sem.view;
      a.num_kv_heads = KH;
      a.page_size = P;
      a.sliding_win_size = window;
      if (QL > 1) {
        a.q_seq_len = QL;
        a.mask = s[i].mask.view;
      }
      xqa(a);
    };
    Result r;
    r.op = "xqa";
    r.shape = window > 0 ? fmt::format("b{} L{} w{}", B, L, window) : fmt::format("b{} L{}", B, L);
    if (D != 128) r.shape += fmt::format(" hd{}", D);
    if (QL > 1) r.shape += fmt::format(" q{}", QL);
    r.dtype = std::string("kv ") + dtype_name(kv_dtype);
    r.ms = time_median(sets, o, call);
    r.bytes = 2.0 * B * read_len * KH * D * dtype_size(kv_dtype) + 2.0 * B * QL * H * D * 2;
    return r;
  }
}

}  // namespace

std::vector<Result> bench_xqa(DType kv_dtype, const Options& o) {
  const std::pair<int, int> shapes[] = {{1, 32768}, {16, 8192}, {64, 4096}, {128, 2048}};
  std::vector<Result> out;
  std::mt19937 rng(42);
  for (auto [B, L] : shapes) {
    if (o.only_batch > 0 && B != o.only_batch) continue;
    if (o.seq_len > 0) L = o.seq_len;
    out.push_back(time_xqa(B, L, 0, kv_dtype, o, rng));
  }
  // Issue 9 item 4: head_dim 384 and 512 (warps split the output dims) at the
  // large-batch shapes, beside the head_dim 128 rows above; goal >= 90% of their TB/s.
  for (int D : {384, 512})
    for (auto [B, L] : {std::pair{64, 4096}, std::pair{128, 2048}}) {
      if (o.only_batch > 0 && B != o.only_batch) continue;
      if (o.seq_len > 0) L = o.seq_len;
      out.push_back(time_xqa(B, L, 0, kv_dtype, o, rng, D));
    }
  // Issue 9 item 5: speculative decoding at B16 L8K (FlashInfer at q_seq_len 2/4/8:
  // 158/158/249 us on the H200). Past 16 rows per KV head a CTA holds 64 rows
  // (split-M); ATTNJIT_DECODE_SPLIT_M=0 measures the 16-row kernel beside it.
  for (int QL : {2, 4, 8}) {
    const int B = 16;
    if (o.only_batch > 0 && B != o.only_batch) continue;
    out.push_back(time_xqa(B, o.seq_len > 0 ? o.seq_len : 8192, 0, kv_dtype, o, rng, 128, QL));
  }
  return out;
}

std::vector<Result> bench_xqa_window(DType kv_dtype, const Options& o) {
  const int kBatch = 4;
  std::vector<Result> out;
  std::mt19937 rng(43);
  // Each group: the plain sequence the window holds (W + q_seq_len - 1 keys), then the windows.
  auto group = [&](int window, std::initializer_list<int> lens, int QL = 1) {
    const Result plain = time_xqa(kBatch, window + QL - 1, 0, kv_dtype, o, rng, 128, QL);
    out.push_back(plain);
    for (int L : lens) {
      out.push_back(time_xqa(kBatch, L, window, kv_dtype, o, rng, 128, QL));
      out.back().plain_ms = plain.ms;
    }
  };
  group(4096, {8192, 32768, 131072});
  group(32768, {131072});
  group(4096, {32768}, 3);  // speculative decoding: the union of three rows' windows
  return out;
}

namespace {

// window_left >= 0: a sliding window; the sets then share one K and one V buffer,
// each set's sequence shifted by the window, so that every call reads other bytes
// (sets x L tokens each would not fit at L 128K).
Result time_single_decode(int H, int KH, int L, DType kv_dtype, const Options& o,
                          std::mt19937& rng, int window_left = -1, int D = 128) {
  const int read_len = window_left >= 0 ? std::min(L, window_left + 1) : L;
  const double kv_bytes = 2.0 * read_len * KH * D * dtype_size(kv_dtype);
  const int sets = std::max(1, int(std::ceil(3 * kL2Bytes / kv_bytes)));
  const int shift = window_left >= 0 ? read_len : 0;
  const int64_t tokens = window_left >= 0 ? int64_t(L) + int64_t(sets - 1) * shift : L;
  struct Set {
    DeviceTensor q, out;
    TensorView k, v;
  };
  std::vector<DeviceTensor> ks, vs;
  const int buffers = window_left >= 0 ? 1 : sets;
  for (int i = 0; i < buffers; ++i) {
    ks.emplace_back(kv_dtype, std::vector<int64_t>{tokens, KH, D});
    vs.emplace_back(kv_dtype, std::vector<int64_t>{tokens, KH, D});
    ks.back().upload(random_bytes(size_t(tokens) * KH * D, kv_dtype, rng));
    vs.back().upload(random_bytes(size_t(tokens) * KH * D, kv_dtype, rng));
  }
  std::vector<Set> s(sets);
  for (int i = 0; i < sets; ++i) {
    auto& x = s[i];
    x.q = DeviceTensor(DType::kBFloat16, {H, D});
    x.out = DeviceTensor(DType::kBFloat16, {H, D});
    x.q.upload(random_bytes(size_t(H) * D, DType::kBFloat16, rng));
    const int buf = window_left >= 0 ? 0 : i;
    const size_t offset = size_t(i) * shift * KH * D * dtype_size(kv_dtype);
    x.k = ks[buf].view;
    x.v = vs[buf].view;
    x.k.shape[0] = x.v.shape[0] = L;
    x.k.data = static_cast<char*>(x.k.data) + offset;
    x.v.data = static_cast<char*>(x.v.data) + offset;
  }
  SingleDecodeOptions opt;
  opt.window_left = window_left;
  auto call = [&](int i) { single_decode_with_kv_cache(s[i].q.view, s[i].k, s[i].v, s[i].out.view, opt); };
  Result r;
  r.op = "single_decode";
  r.shape = H / KH == 4 ? fmt::format("L{}", L) : fmt::format("L{} g{}", L, H / KH);
  if (D != 128) r.shape += fmt::format(" hd{}", D);
  if (window_left >= 0) r.shape += fmt::format(" w{}", window_left + 1);
  r.dtype = std::string("kv ") + dtype_name(kv_dtype);
  r.ms = time_median(sets, o, call);
  r.bytes = kv_bytes + 2.0 * H * D * 2;
  return r;
}

}  // namespace

std::vector<Result> bench_single_decode(DType kv_dtype, const Options& o) {
  std::vector<Result> out;
  std::mt19937 rng(7);
  for (int L : {4096, 32768, 131072}) out.push_back(time_single_decode(32, 8, L, kv_dtype, o, rng));
  // Past head_dim 256 (split-D): its rate against the head_dim 128 row of the same length.
  for (int L : {32768, 131072}) out.push_back(time_single_decode(32, 8, L, kv_dtype, o, rng, -1, 512));
  return out;
}

std::vector<Result> bench_single_decode_window(DType kv_dtype, const Options& o) {
  std::vector<Result> out;
  std::mt19937 rng(44);
  auto group = [&](int window, std::initializer_list<int> lens) {
    const Result plain = time_single_decode(32, 8, window, kv_dtype, o, rng);
    out.push_back(plain);
    for (int L : lens) {
      out.push_back(time_single_decode(32, 8, L, kv_dtype, o, rng, window - 1));
      out.back().plain_ms = plain.ms;
    }
  };
  group(4096, {32768, 131072});
  group(32768, {131072});
  return out;
}

}  // namespace attnjit::bench
