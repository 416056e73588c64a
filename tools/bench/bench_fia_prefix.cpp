// attnjit-bench --fia, the shared-prefix rows (issue 12): B batches over a P-token
// key/value_shared_prefix should cost about P tokens of KV reads, not B * P. The
// grid walks a KV head's tiles of every batch before the next head's, so the CTAs
// reading one prefix run together and share it through L2. Rows: B = 16 with the
// prefix, B = 1 with the prefix, and B = 16 with the same prefix copied into each
// batch's own KV; the ratios say what the prefix costs against both.
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/fia.hpp"
#include "bench_cases.hpp"
#include "bench_timing.hpp"
#include "common/device_tensor.hpp"

namespace attnjit::bench {

using testing::DeviceTensor;

namespace {

constexpr DType kDt = DType::kBFloat16;
constexpr int kHeads = 32, kKvHeads = 8, kHd = 128, kOwn = 256;

struct PrefixCase {
  DeviceTensor q, k, v, out, kp, vp;
  FiaArgs a;
};

// B batches of q_seq queries over [prefix (P) | own (kOwn)], or with copied = true the
// P + kOwn tokens all in each batch's own KV.
void make(PrefixCase& x, int B, int q_seq, int P, bool copied, Backend backend, std::mt19937& rng) {
  const int own = copied ? P + kOwn : kOwn;
  x.q = DeviceTensor(kDt, {B, q_seq, kHeads, kHd});
  x.out = DeviceTensor(kDt, {B, q_seq, kHeads, kHd});
  x.k = DeviceTensor(kDt, {B, own, kKvHeads, kHd});
  x.v = DeviceTensor(kDt, {B, own, kKvHeads, kHd});
  for (DeviceTensor* t : {&x.q, &x.k, &x.v}) t->upload(random_bytes(size_t(t->view.numel()), kDt, rng));
  x.a = FiaArgs{};
  x.a.query = x.q.view;
  x.a.key = x.k.view;
  x.a.value = x.v.view;
  x.a.attention_out = x.out.view;
  x.a.input_layout = "BSND";
  x.a.num_heads = kHeads;
  x.a.num_key_value_heads = kKvHeads;
  x.a.scale = 1.0 / std::sqrt(double(kHd));
  x.a.backend = backend;
  if (!copied) {
    x.kp = DeviceTensor(kDt, {1, P, kKvHeads, kHd});
    x.vp = DeviceTensor(kDt, {1, P, kKvHeads, kHd});
    for (DeviceTensor* t : {&x.kp, &x.vp}) t->upload(random_bytes(size_t(t->view.numel()), kDt, rng));
    x.a.key_shared_prefix = x.kp.view;
    x.a.value_shared_prefix = x.vp.view;
  }
}

}  // namespace

int bench_fia_prefix(const Options& o) {
  fmt::print("\n{:<52} {:>9} {:>9} {:>11} {:>11}\n", "fia shared prefix (bf16, BSND, N 32/8, D 128, own 256)", "ms",
             "TB/s", "vs B1", "vs copied");
  std::mt19937 rng(12);
  for (Backend backend : {Backend::kXqa, Backend::kTrtllmGen}) {
    const char* name = backend == Backend::kXqa ? "xqa" : "trtllm-gen";
    for (int q_seq : {1, 128}) {
      for (int P : {8192, 32768}) {
        double ms[3] = {0, 0, 0};
        bool ok = true;
        // 0: B 16 with the prefix; 1: B 1 with the prefix; 2: B 16, the prefix copied into each batch.
        for (int row = 0; row < 3 && ok; ++row) {
          PrefixCase x;
          make(x, row == 1 ? 1 : 16, q_seq, P, row == 2, backend, rng);
          try {
            fused_infer_attention_score(x.a);
          } catch (const Error& e) {  // trtllm-gen off sm_90a
            fmt::print("{:<52} {}\n", name, e.what());
            ok = false;
            break;
          }
          ms[row] = time_median(1, o, [&](int) { fused_infer_attention_score(x.a); });
        }
        if (!ok) break;
        // Unique KV bytes: the prefix once plus each batch's own tokens (copied: B * (P + own)).
        const double tok_bytes = 2.0 * kKvHeads * kHd * 2;
        const double bytes[3] = {(P + 16.0 * kOwn) * tok_bytes, (P + double(kOwn)) * tok_bytes,
                                 16.0 * (P + kOwn) * tok_bytes};
        const char* what[3] = {"B16 prefix", "B1 prefix", "B16 copied"};
        for (int row = 0; row < 3; ++row)
          fmt::print("{:<52} {:>9.3f} {:>9.2f} {:>11} {:>11}\n",
                     fmt::format("{} q_seq {} P {} {}", what[row], q_seq, P, name), ms[row],
                     bytes[row] / (ms[row] * 1e-3) / 1e12, row == 0 ? fmt::format("{:.2f}x", ms[0] / ms[1]) : "",
                     row == 0 ? fmt::format("{:.3f}x", ms[0] / ms[2]) : "");
      }
    }
  }
  return 0;
}

}  // namespace attnjit::bench
