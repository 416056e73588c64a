// attnjit-bench --mla: batch_decode_mla at the issue 10 shapes (page 64; on both backends, bf16 KV
// and fp8 e4m3 KV with a bf16 and an fp8 query), timed with CUDA events over rotating input sets larger than
// L2; prints TB/s (KV bytes stored, L*576*elem per request, read once) and TFLOP/s
// (2*(576+512)*L per query row and head).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <random>

#include "attnjit/mla.hpp"
#include "bench_cases.hpp"
#include "bench_timing.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"

namespace attnjit::bench {

namespace {

using testing::DeviceTensor;
constexpr double kGemmTflops = 790.0;  // measured bf16 GEMM rate of the H200

struct MlaShape {
  int heads, batch, q_len, len;
  DType q = DType::kBFloat16, kv = DType::kBFloat16;  // an fp8 query writes bf16
};

// Sets an environment variable for a scope, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { old_.empty() ? unsetenv(name_) : setenv(name_, old_.c_str(), 1); }

 private:
  const char* name_;
  std::string old_;
};

Result time_mla(const MlaShape& sh, Backend backend, const Options& o, std::mt19937& rng, double* tflops) {
  const int H = sh.heads, B = sh.batch, T = sh.q_len, L = sh.len, P = 64;
  const DType qt = sh.q, kvt = sh.kv, ot = qt == DType::kFloat8E4M3 ? DType::kBFloat16 : qt;
  const int sm = driver::device_info(driver::current_device()).sm_count;
  const int pps = (L + P - 1) / P, pages = B * pps;
  const double kv_bytes = double(B) * L * 576 * dtype_size(kvt);
  const int sets = std::max(1, int(std::ceil(3 * kL2Bytes / kv_bytes)));
  struct Set {
    DeviceTensor q, kv, out, bt, sl, ws;
  };
  std::vector<Set> s(sets);
  for (auto& x : s) {
    x.q = DeviceTensor(qt, {B, T, H, 576});
    x.out = DeviceTensor(ot, {B, T, H, 512});
    x.kv = DeviceTensor(kvt, {pages, P, 576});
    x.q.upload(random_bytes(size_t(B) * T * H * 576, qt, rng));
    x.kv.upload(random_bytes(size_t(pages) * P * 576, kvt, rng));
    std::vector<int> ids(pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    x.bt = DeviceTensor(DType::kInt32, {B, pps});
    x.bt.upload_pod(ids);
    x.sl = DeviceTensor(DType::kInt32, {B});
    x.sl.upload_pod(std::vector<int>(B, L));
    x.ws = DeviceTensor(DType::kUInt8, {int64_t(std::max<size_t>(256, mla_workspace_bytes(B, H, T, pps * P, sm)))});
    x.ws.zero();
  }
  auto call = [&](int i) {
    MlaArgs a;
    a.query = s[i].q.view;
    a.kv_cache = s[i].kv.view;
    a.out = s[i].out.view;
    a.block_tables = s[i].bt.view;
    a.seq_lens = s[i].sl.view;
    a.max_seq_len = pps * P;
    a.workspace_buffer = s[i].ws.view;
    a.bmm1_scale = 1.0f / 24.0f;
    a.backend = backend;
    batch_decode_mla(a);
  };
  Result r;
  r.op = backend == Backend::kTrtllmGen ? "mla trtllm-gen" : "mla xqa";
  r.shape = fmt::format("h{} B{} q{} L{}", H, B, T, L);
  r.dtype = kvt == qt ? std::string(dtype_name(qt)) : fmt::format("{}/kv {}", dtype_name(qt), dtype_name(kvt));
  r.ms = time_median(sets, o, call);
  r.bytes = kv_bytes;
  *tflops = 2.0 * (576 + 512) * double(L) * B * T * H / (r.ms * 1e-3) / 1e12;
  return r;
}

}  // namespace

std::vector<Result> bench_mla(const Options& o) {
  std::mt19937 rng(10);
  // Issue 10's table: memory-bound 16 heads, compute-bound 128 heads, 64 heads, one long sequence.
  // Then fp8 e4m3 KV at 16 heads B128 L4K (goal >= 4.2 TB/s of bytes stored), with a bf16 and an fp8
  // query, and at the compute-bound and long-sequence shapes.
  const DType bf16 = DType::kBFloat16, fp8 = DType::kFloat8E4M3;
  const MlaShape shapes[] = {{16, 128, 1, 4096},  {16, 32, 1, 16384}, {128, 128, 2, 4096}, {128, 64, 1, 8192},
                             {128, 128, 1, 4096}, {64, 16, 1, 8192},  {128, 1, 1, 32768},
                             {16, 128, 1, 4096, bf16, fp8}, {16, 128, 1, 4096, fp8, fp8},
                             {128, 128, 1, 4096, bf16, fp8}, {128, 128, 2, 4096, fp8, fp8}, {128, 64, 1, 8192, bf16, fp8},
                             {64, 16, 1, 8192, bf16, fp8}, {128, 1, 1, 32768, bf16, fp8},
                             // Where auto's choices turn: one or two short requests (few CTAs before
                             // splitting), and 2 splits a request (the smallest count a combine launch takes).
                             {16, 1, 1, 4096},    {128, 1, 1, 4096},   {64, 2, 1, 16384},  {16, 64, 1, 8192},
                             // 17-32 rows (the 32-row narrow tile): DeepSeek at TP8 with one MTP draft, at TP4.
                             {16, 128, 2, 4096}, {32, 128, 1, 4096}};
  std::vector<Result> out;
  // Every dense shape runs on both backends (xqa: mma.sync; trtllm-gen: the sm_90a wgmma kernel) in
  // the same run; the last column is xqa's time over trtllm-gen's.
  // trtllm-gen/16, /32 and /64: its narrow tile (16 or fewer rows a CTA; 17-32 with 16-bit KV) and, for
  // those shapes, its 64-row tile.
  fmt::print("{:<24} {:<14} {:<22} {:>10} {:>8} {:>7} {:>9} {:>7} {:>8}\n", "mla (page 64)", "backend", "q / kv", "us",
             "TB/s", "% HBM", "TFLOP/s", "% GEMM", "vs xqa");
  const int cc = driver::device_info(driver::current_device()).sm_major * 10 +
                 driver::device_info(driver::current_device()).sm_minor;
  for (const MlaShape& sh : shapes) {
    if (o.only_batch && sh.batch != o.only_batch) continue;
    if (o.only_kv && std::string(o.only_kv) != dtype_name(sh.kv)) continue;
    if (o.only_heads && sh.heads != o.only_heads) continue;
    if (o.only_q_len && sh.q_len != o.only_q_len) continue;
    const bool both = cc == 90;
    double xqa_ms = 0;
    // Up to 16 rows (32 with 16-bit KV): trtllm-gen runs its narrow tile, then (same run) the 64-row tile.
    const int rows = sh.heads * sh.q_len;
    const bool narrow = rows <= 16 || (rows <= 32 && sh.kv != fp8);
    for (int pass = 0; pass < (both && narrow ? 3 : 2); ++pass) {
      const Backend b = pass == 0 ? Backend::kXqa : Backend::kTrtllmGen;
      if (b == Backend::kTrtllmGen && !both) continue;
      if (o.only_backend && std::string(o.only_backend) != (b == Backend::kXqa ? "xqa" : "trtllm-gen")) continue;
      std::optional<ScopedEnv> wide;
      if (pass == 2) wide.emplace("ATTNJIT_MLA_NARROW", "0");
      double tflops = 0;
      Result r = time_mla(sh, b, o, rng, &tflops);
      if (pass == 2) r.op += " wide";
      if (b == Backend::kXqa) xqa_ms = r.ms;
      const char* label = b == Backend::kXqa ? "xqa" : pass == 2 ? "trtllm-gen/64"
                          : narrow       ? (rows <= 16 ? "trtllm-gen/16" : "trtllm-gen/32")
                                         : "trtllm-gen";
      fmt::print("{:<24} {:<14} {:<22} {:>10.2f} {:>8.3f} {:>6.1f}% {:>9.1f} {:>6.1f}% {:>8}\n", r.shape, label, r.dtype,
                 r.ms * 1e3, r.tbs(), r.pct(), tflops, 100.0 * tflops / kGemmTflops,
                 b == Backend::kXqa || xqa_ms == 0 ? std::string("") : fmt::format("{:.2f}x", xqa_ms / r.ms));
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace attnjit::bench
