// `attnjit demo`: the whole path in one command. Prewarm a bundled config,
// inspect one of its kernels, and on a GPU launch single_decode_with_kv_cache
// on random data and compare it with a float64 CPU reference.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "attnjit/decode.hpp"
#include "attnjit/error.hpp"
#include "cli/context.hpp"
#include "cli/prewarm.hpp"
#include "driver/cuda_driver.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit::cli {

namespace {

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                     // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct LaunchReport {
  double max_abs_err = 0, rel_l2 = 0;
  int64_t unwritten = 0;
};

// q: [heads, hd], k/v: [kv_len, kv_heads, hd] (NHD), bf16, random in [-1, 1].
LaunchReport launch_and_check(Runtime& rt, int heads, int kv_heads, int hd, int kv_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto random_bf16 = [&](size_t n, std::vector<uint16_t>& bits, std::vector<double>& vals) {
    bits.resize(n);
    vals.resize(n);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16(dist(rng));
      vals[i] = bf16_to_float(bits[i]);  // the reference sees exactly what the GPU sees
    }
  };
  std::vector<uint16_t> hq, hk, hv;
  std::vector<double> q, k, v;
  random_bf16(size_t(heads) * hd, hq, q);
  random_bf16(size_t(kv_len) * kv_heads * hd, hk, k);
  random_bf16(size_t(kv_len) * kv_heads * hd, hv, v);

  driver::DeviceBuffer dq(hq.size() * 2), dk(hk.size() * 2), dv(hv.size() * 2), dout(hq.size() * 2);
  driver::memcpy_htod(dq.get(), hq.data(), hq.size() * 2);
  driver::memcpy_htod(dk.get(), hk.data(), hk.size() * 2);
  driver::memcpy_htod(dv.get(), hv.data(), hv.size() * 2);
  driver::memset_d8(dout.get(), 0xff, hq.size() * 2);  // NaN poison: every element must be written

  const auto tq = TensorView::contiguous(dq.ptr(), DType::kBFloat16, {heads, hd});
  const auto tk = TensorView::contiguous(dk.ptr(), DType::kBFloat16, {kv_len, kv_heads, hd});
  const auto tv = TensorView::contiguous(dv.ptr(), DType::kBFloat16, {kv_len, kv_heads, hd});
  const auto to = TensorView::contiguous(dout.ptr(), DType::kBFloat16, {heads, hd});
  single_decode_with_kv_cache(tq, tk, tv, to, SingleDecodeOptions{}, nullptr, nullptr, &rt);
  driver::ctx_sync();
  std::vector<uint16_t> hout(hq.size());
  driver::memcpy_dtoh(hout.data(), dout.get(), hout.size() * 2);

  // float64 reference: softmax(q k^T / sqrt(hd)) v per query head.
  LaunchReport rep;
  const int group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  double err2 = 0, ref2 = 0;
  std::vector<double> logits(kv_len), ref(hd);
  for (int h = 0; h < heads; ++h) {
    const int kh = h / group;
    double mx = -INFINITY;
    for (int t = 0; t < kv_len; ++t) {
      double s = 0;
      for (int d = 0; d < hd; ++d) s += q[size_t(h) * hd + d] * k[(size_t(t) * kv_heads + kh) * hd + d];
      logits[t] = s * scale;
      mx = std::max(mx, logits[t]);
    }
    double den = 0;
    for (int t = 0; t < kv_len; ++t) den += (logits[t] = std::exp(logits[t] - mx));
    std::fill(ref.begin(), ref.end(), 0.0);
    for (int t = 0; t < kv_len; ++t)
      for (int d = 0; d < hd; ++d) ref[d] += logits[t] / den * v[(size_t(t) * kv_heads + kh) * hd + d];
    for (int d = 0; d < hd; ++d) {
      const double got = bf16_to_float(hout[size_t(h) * hd + d]);
      if (std::isnan(got)) {
        ++rep.unwritten;
        continue;
      }
      rep.max_abs_err = std::max(rep.max_abs_err, std::abs(got - ref[d]));
      err2 += (got - ref[d]) * (got - ref[d]);
      ref2 += ref[d] * ref[d];
    }
  }
  rep.rel_l2 = std::sqrt(err2 / std::max(ref2, 1e-300));
  return rep;
}

}  // namespace

void add_demo_command(CLI::App& app, Context& ctx) {
  struct Options {
    std::string config = "llama-3-8b";
    int jobs = 0;
    int kv_len = 4096;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "demo", "Prewarm a bundled config, inspect one kernel, and launch it on a GPU if there is one");
  sub->add_option("-c,--config", o->config, "Model config to prewarm (default: llama-3-8b)");
  sub->add_option("-j,--jobs", o->jobs, "Compile threads (default: hardware concurrency)")->check(CLI::Range(0, 4096));
  sub->add_option("--kv-len", o->kv_len, "KV length of the test launch")->check(CLI::Range(1, 1 << 20));
  sub->callback([&ctx, o] {
    ctx.action = [&ctx, o]() -> int {
      Runtime& rt = ctx.runtime();
      std::string why;
      const spec::Arch arch = default_arch(&why);
      std::cout << fmt::format("== 1. prewarm {} for {} ({})\n", o->config, arch.str(), why) << std::flush;
      ModelPlan plan = load_model_plan(o->config, {arch});
      const PrewarmResult r = prewarm_specs(rt, plan.specs, o->jobs, progress_mode(false));
      print_prewarm_summary(plan, r);
      if (r.failed) return kExitFailure;

      // The kernel the launch below uses: the config's contiguous decode variant.
      const spec::KernelSpec* pick = nullptr;
      for (const auto& s : plan.specs)
        if (s.family == spec::OpFamily::kDecode && s.kv_dtype == s.q_dtype && !pick) pick = &s;
      if (!pick && !plan.specs.empty()) pick = &plan.specs.front();
      if (!pick) {
        std::cout << "the config has no kernels to inspect or launch\n";
        return kExitOk;
      }
      const runtime::Artifact& a = rt.registry().artifact(*pick);
      std::cout << fmt::format("\n== 2. inspect {}\n", a.name)
                << fmt::format("key:        {}\n", a.key)
                << fmt::format("compile:    {:.1f} ms, {} registers, {} B stack, {} B spills\n", a.compile_ms,
                               a.resources.registers, a.resources.stack_bytes,
                               a.resources.spill_stores + a.resources.spill_loads)
                << fmt::format("cubin:      {}\n", human_bytes(static_cast<int64_t>(a.cubin.size())))
                << "source (`attnjit inspect " << a.name << " --source`):\n"
                << a.unit.source << std::flush;

      std::cout << "\n== 3. launch\n";
      std::string reason;
      if (!driver::is_available(&reason) || driver::device_count() == 0) {
        std::cout << "no GPU: skipping the launch (" << (reason.empty() ? "no device" : reason) << ")\n";
        return kExitOk;
      }
      const bool use_pick = pick->family == spec::OpFamily::kDecode && pick->q_dtype == DType::kBFloat16 &&
                            pick->features == 0 && pick->layout == spec::KvLayout::kNHD &&
                            pick->pos_encoding == spec::PosEncoding::kNone;
      if (!use_pick)
        std::cout << "the config has no plain bf16 NHD decode kernel: launching a 32/8-head hd128 one instead\n";
      const int hd = use_pick ? pick->head_dim_qk : 128;
      const int group = use_pick ? pick->group_size : 4;
      const int kv_heads = 8, heads = kv_heads * group;
      const auto rep = launch_and_check(rt, heads, kv_heads, hd, o->kv_len, 1234);
      const bool pass = rep.unwritten == 0 && rep.rel_l2 <= 1e-2;
      std::cout << fmt::format(
          "single_decode_with_kv_cache bf16: {} q heads, {} kv heads, head_dim {}, kv_len {} on {}\n"
          "vs float64 CPU reference: max abs error {:.3e}, relative L2 error {:.3e}, unwritten {} -> {}\n",
          heads, kv_heads, hd, o->kv_len, driver::device_info(driver::current_device()).name, rep.max_abs_err,
          rep.rel_l2, rep.unwritten, pass ? "PASS" : "FAIL");
      return pass ? kExitOk : kExitFailure;
    };
  });
}

}  // namespace attnjit::cli
