// attnjit-bench --fia, decode rows: fused_infer_attention_score at Q_S = 1 (BSND
// contiguous K/V, the decode family's kernel) against xqa (pages of 32, shuffled)
// and, at batch 1, single_decode, on the same shape: TB/s and FIA's ratio to them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "attnjit/decode.hpp"
#include "attnjit/fia.hpp"
#include "attnjit/xqa.hpp"
#include "bench_cases.hpp"
#include "bench_timing.hpp"

namespace attnjit::bench {

namespace {

using testing::DeviceTensor;

constexpr int kHeads = 32, kKvHeads = 8, kHd = 128, kXqaPage = 32;
constexpr DType kDt = DType::kBFloat16;

double kv_bytes(int B, int L) { return 2.0 * B * L * kKvHeads * kHd * dtype_size(kDt); }
double bytes(int B, int L) { return kv_bytes(B, L) + 2.0 * B * kHeads * kHd * dtype_size(kDt); }
int sets_for(int B, int L) { return std::max(1, int(std::ceil(3 * kL2Bytes / kv_bytes(B, L)))); }

double time_fia(int B, int L, const Options& o, std::mt19937& rng) {
  struct Set {
    DeviceTensor q, k, v, out;
  };
  std::vector<Set> s(size_t(sets_for(B, L)));
  for (auto& x : s) {
    x.q = DeviceTensor(kDt, {B, 1, kHeads, kHd});
    x.out = DeviceTensor(kDt, {B, 1, kHeads, kHd});
    x.k = DeviceTensor(kDt, {B, L, kKvHeads, kHd});
    x.v = DeviceTensor(kDt, {B, L, kKvHeads, kHd});
    x.q.upload(random_bytes(size_t(B) * kHeads * kHd, kDt, rng));
    x.k.upload(random_bytes(size_t(B) * L * kKvHeads * kHd, kDt, rng));
    x.v.upload(random_bytes(size_t(B) * L * kKvHeads * kHd, kDt, rng));
  }
  auto args = [&](int i) {
    FiaArgs a;
    a.query = s[size_t(i)].q.view;
    a.key = s[size_t(i)].k.view;
    a.value = s[size_t(i)].v.view;
    a.attention_out = s[size_t(i)].out.view;
    a.input_layout = "BSND";
    a.num_heads = kHeads;
    a.num_key_value_heads = kKvHeads;
    a.scale = 1.0 / std::sqrt(double(kHd));
    return a;
  };
  fmt::print("  fia kernel: {}\n", prewarm_fused_infer_attention_score(args(0)));
  return time_median(int(s.size()), o, [&](int i) { fused_infer_attention_score(args(i)); });
}

double time_xqa_same_shape(int B, int L, const Options& o, std::mt19937& rng) {
  const int G = kHeads / kKvHeads, pps = (L + kXqaPage - 1) / kXqaPage, pages = B * pps;
  const int sm = driver::device_info(driver::current_device()).sm_count;
  struct Set {
    DeviceTensor q, k, v, out, pt, sl, ws, sem;
  };
  std::vector<Set> s(size_t(sets_for(B, L)));
  for (auto& x : s) {
    x.q = DeviceTensor(kDt, {B, 1, kHeads, kHd});
    x.out = DeviceTensor(kDt, {B, 1, kHeads, kHd});
    x.k = DeviceTensor(kDt, {pages, kXqaPage, kKvHeads, kHd});
    x.v = DeviceTensor(kDt, {pages, kXqaPage, kKvHeads, kHd});
    x.q.upload(random_bytes(size_t(B) * kHeads * kHd, kDt, rng));
    x.k.upload(random_bytes(size_t(pages) * kXqaPage * kKvHeads * kHd, kDt, rng));
    x.v.upload(random_bytes(size_t(pages) * kXqaPage * kKvHeads * kHd, kDt, rng));
    std::vector<int> ids(static_cast<size_t>(pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    x.pt = DeviceTensor(DType::kInt32, {B, pps});
    x.pt.upload_pod(ids);
    x.sl = DeviceTensor(DType::kUInt32, {B, 1});
    x.sl.upload_pod(std::vector<uint32_t>(size_t(B), uint32_t(L)));
    x.ws = DeviceTensor(DType::kUInt8,
                        {int64_t(std::max<size_t>(16, xqa_workspace_bytes(B, kKvHeads, G, 1, kHd, pps * kXqaPage, sm)))});
    x.sem = DeviceTensor(DType::kUInt32, {int64_t(xqa_semaphore_count(B, kKvHeads, G, 1))});
    x.sem.zero();
  }
  return time_median(int(s.size()), o, [&](int i) {
    XqaArgs a;
    a.q = s[size_t(i)].q.view;
    a.k_cache = s[size_t(i)].k.view;
    a.v_cache = s[size_t(i)].v.view;
    a.page_table = s[size_t(i)].pt.view;
    a.seq_lens = s[size_t(i)].sl.view;
    a.output = s[size_t(i)].out.view;
    a.workspace_buffer = s[size_t(i)].ws.view;
    a.semaphores = s[size_t(i)].sem.view;
    a.num_kv_heads = kKvHeads;
    a.page_size = kXqaPage;
    xqa(a);
  });
}

double time_single(int L, const Options& o, std::mt19937& rng) {
  struct Set {
    DeviceTensor q, k, v, out;
  };
  std::vector<Set> s(size_t(sets_for(1, L)));
  for (auto& x : s) {
    x.q = DeviceTensor(kDt, {kHeads, kHd});
    x.out = DeviceTensor(kDt, {kHeads, kHd});
    x.k = DeviceTensor(kDt, {L, kKvHeads, kHd});
    x.v = DeviceTensor(kDt, {L, kKvHeads, kHd});
    x.q.upload(random_bytes(size_t(kHeads) * kHd, kDt, rng));
    x.k.upload(random_bytes(size_t(L) * kKvHeads * kHd, kDt, rng));
    x.v.upload(random_bytes(size_t(L) * kKvHeads * kHd, kDt, rng));
  }
  return time_median(int(s.size()), o, [&](int i) {
    single_decode_with_kv_cache(s[size_t(i)].q.view, s[size_t(i)].k.view, s[size_t(i)].v.view, s[size_t(i)].out.view);
  });
}

}  // namespace

int bench_fia_decode(const Options& o) {
  struct Shape {
    int batch, len;
  };
  const Shape shapes[] = {{128, 4096}, {1, 32768}};
  fmt::print("\n{:<44} {:>9} {:>8} {:>8}\n", "fia decode (bf16, D128, 32/8 heads, BSND)", "us", "TB/s", "ratio");
  std::mt19937 rng(3);
  for (const Shape& sh : shapes) {
    const double b = bytes(sh.batch, sh.len);
    auto tbs = [&](double ms) { return b / (ms * 1e-3) / 1e12; };
    fmt::print("B{} KV{}\n", sh.batch, sh.len);
    const double fia = time_fia(sh.batch, sh.len, o, rng);
    const double x = time_xqa_same_shape(sh.batch, sh.len, o, rng);
    fmt::print("  {:<42} {:>9.2f} {:>8.2f}\n", "fia (Q_S = 1)", fia * 1e3, tbs(fia));
    fmt::print("  {:<42} {:>9.2f} {:>8.2f} {:>8.3f}  (fia / xqa TB/s; goal >= 0.95)\n",
               fmt::format("xqa (pages of {}, shuffled)", kXqaPage), x * 1e3, tbs(x), tbs(fia) / tbs(x));
    if (sh.batch == 1) {
      const double sd = time_single(sh.len, o, rng);
      fmt::print("  {:<42} {:>9.2f} {:>8.2f} {:>8.3f}  (fia / single_decode TB/s)\n", "single_decode", sd * 1e3,
                 tbs(sd), tbs(fia) / tbs(sd));
    }
  }
  return 0;
}

}  // namespace attnjit::bench
