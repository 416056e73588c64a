// attnjit-bench --fia-mla: MLA inside FIA (query_rope/key_rope, the mla kernel's splitrope
// variant) beside batch_decode_mla on the same shapes (bf16, pages of 128, shuffled), timed
// with CUDA events over rotating input sets larger than L2: TB/s of KV bytes stored
// (L*576*2 per request) and the ratio FIA / batch_decode_mla (the split tensors should cost nothing).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "attnjit/fia.hpp"
#include "attnjit/mla.hpp"
#include "bench_cases.hpp"
#include "bench_timing.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::bench {

namespace {

using testing::DeviceTensor;
constexpr int kPage = 128;  // FIA's MLA takes 16 or 128; batch_decode_mla 16 to 128

struct Shape {
  int heads, batch, q_len, len;
};

// Median ms of FIA (fia = true: nope/rope tensors apart, BSND) or batch_decode_mla (one 576 cache).
double time_one(const Shape& sh, bool fia, const Options& o, std::mt19937& rng) {
  const int H = sh.heads, B = sh.batch, T = sh.q_len, L = sh.len;
  const DType dt = DType::kBFloat16;
  const int pps = (L + kPage - 1) / kPage, pages = B * pps;
  const double kv_bytes = double(B) * L * 576 * 2;
  const int sets = std::max(1, int(std::ceil(3 * kL2Bytes / kv_bytes)));
  const int sm = driver::device_info(driver::current_device()).sm_count;
  struct Set {
    DeviceTensor q, qr, k, kr, out, bt, sl, ws, mask;
  };
  std::vector<Set> s(sets);
  for (auto& x : s) {
    std::vector<int> ids(pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    x.bt = DeviceTensor(DType::kInt32, {B, pps});
    x.bt.upload_pod(ids);
    x.out = DeviceTensor(dt, {B, T, H, 512});
    if (fia) {
      x.q = DeviceTensor(dt, {B, T, H, 512});
      x.qr = DeviceTensor(dt, {B, T, H, 64});
      x.k = DeviceTensor(dt, {pages, kPage, 512});
      x.kr = DeviceTensor(dt, {pages, kPage, 64});
      x.q.upload(random_bytes(size_t(B) * T * H * 512, dt, rng));
      x.qr.upload(random_bytes(size_t(B) * T * H * 64, dt, rng));
      x.k.upload(random_bytes(size_t(pages) * kPage * 512, dt, rng));
      x.kr.upload(random_bytes(size_t(pages) * kPage * 64, dt, rng));
      if (T > 1) x.mask = DeviceTensor(DType::kUInt8, {2048, 2048});  // sparse 3: never read
    } else {
      x.q = DeviceTensor(dt, {B, T, H, 576});
      x.k = DeviceTensor(dt, {pages, kPage, 576});
      x.q.upload(random_bytes(size_t(B) * T * H * 576, dt, rng));
      x.k.upload(random_bytes(size_t(pages) * kPage * 576, dt, rng));
      x.sl = DeviceTensor(DType::kInt32, {B});
      x.sl.upload_pod(std::vector<int>(size_t(B), L));
      x.ws = DeviceTensor(DType::kUInt8, {int64_t(std::max<size_t>(256, mla_workspace_bytes(B, H, T, pps * kPage, sm)))});
      x.ws.zero();
    }
  }
  const std::vector<int64_t> lens(static_cast<size_t>(B), static_cast<int64_t>(L));
  auto call = [&](int i) {
    if (fia) {
      FiaArgs a;
      a.query = s[i].q.view;
      a.query_rope = s[i].qr.view;
      a.key = a.value = s[i].k.view;
      a.key_rope = s[i].kr.view;
      a.attention_out = s[i].out.view;
      a.input_layout = "BSND";
      a.num_heads = H;
      a.num_key_value_heads = 1;
      a.scale = 1.0 / 24.0;
      a.block_table = s[i].bt.view;
      a.block_size = kPage;
      a.actual_seq_lengths_kv = lens;
      if (T > 1) a.sparse_mode = 3, a.atten_mask = s[i].mask.view;
      fused_infer_attention_score(a);
    } else {
      MlaArgs a;
      a.query = s[i].q.view;
      a.kv_cache = s[i].k.view;
      a.out = s[i].out.view;
      a.block_tables = s[i].bt.view;
      a.seq_lens = s[i].sl.view;
      a.max_seq_len = pps * kPage;
      a.workspace_buffer = s[i].ws.view;
      a.bmm1_scale = 1.0f / 24.0f;
      batch_decode_mla(a);
    }
  };
  return time_median(sets, o, call);
}

}  // namespace

int bench_fia_mla(const Options& o) {
  std::mt19937 rng(12);
  // Issue 10's MLA shapes that FIA's MLA allows (N 32, 64, 128; Q_S 1 to 16).
  const Shape shapes[] = {{128, 64, 1, 8192}, {128, 128, 2, 4096}, {128, 128, 1, 4096},
                          {64, 16, 1, 8192},  {32, 128, 1, 4096},  {128, 1, 1, 32768}};
  fmt::print("{:<44} {:>9} {:>8} {:>8}\n", "fia with query_rope/key_rope (bf16, page 128)", "us", "TB/s", "ratio");
  for (const Shape& sh : shapes) {
    if (o.only_batch && sh.batch != o.only_batch) continue;
    const double kv_bytes = double(sh.batch) * sh.len * 576 * 2;
    auto tbs = [&](double ms) { return kv_bytes / (ms * 1e-3) / 1e12; };
    const double f = time_one(sh, true, o, rng), m = time_one(sh, false, o, rng);
    fmt::print("h{} B{} q{} L{}\n", sh.heads, sh.batch, sh.q_len, sh.len);
    fmt::print("  {:<42} {:>9.2f} {:>8.3f}\n", "fia (splitrope)", f * 1e3, tbs(f));
    fmt::print("  {:<42} {:>9.2f} {:>8.3f} {:>8.3f}  (fia / mla TB/s)\n", "batch_decode_mla", m * 1e3, tbs(m),
               tbs(f) / tbs(m));
  }
  return 0;
}

}  // namespace attnjit::bench
