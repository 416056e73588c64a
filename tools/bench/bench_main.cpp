// attnjit-bench: decode throughput against the HBM roofline, compile and
// start-up costs. Prints a short table last.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "bench_cases.hpp"
#include "bench_timing.hpp"
#include "common/device_tensor.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "ops/common/launch.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/decode/decode_spec.hpp"
#include "render/renderer.hpp"
#include "runtime/kernel_registry.hpp"

using namespace attnjit;
using Clock = std::chrono::steady_clock;

namespace {

double since_us(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

spec::KernelSpec proof_spec(const std::string& arch) {
  spec::KernelSpec s;
  s.family = spec::OpFamily::kDecode;
  s.set_head_dim(128);
  s.group_size = 4;
  s.arch = spec::Arch::parse(arch);
  return s;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Cold NVRTC compiles (no store) of the proof kernel and the benchmark's variants.
int cold_compile(int n, const std::string& arch) {
  std::vector<spec::KernelSpec> specs = {proof_spec(arch)};
  for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
    spec::KernelSpec x = proof_spec(arch);
    x.family = spec::OpFamily::kXqa;
    x.group_size = 8;
    x.page_size = 32;
    x.kv_dtype = kv;
    specs.push_back(x);
    spec::KernelSpec d = proof_spec(arch);
    d.kv_dtype = kv;
    if (kv != DType::kBFloat16) specs.push_back(d);
  }
  for (const auto& s : specs) {
    auto unit = render::render(s);
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) ms.push_back(compile::compile(s.name(), unit, s.arch).compile_ms);
    fmt::print("cold compile {:<42} median {:4.0f} ms over {} (min {:.0f}, max {:.0f})\n", s.name(), median(ms), n,
               *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()));
  }
  return 0;
}

// The larger kernels whose warm start --startup also times, when the store holds them (a
// stage prewarms them for the MLA and prefill rows; compiling one here would time nothing).
const char* const kWarmExtras[] = {"mla.bf16.hd576x512.g1.p64.nhd.causal.trtllmgen",
                                   "prefill.bf16.hd128.g1.contig.nhd.trtllmgen"};

// kWarmExtras' kernel `stem` (a name without its arch token) for arch ("sm_90a"), as proof_spec sets it.
spec::KernelSpec extra_spec(const char* stem, const std::string& arch) {
  spec::KernelSpec s = spec::KernelSpec::from_name(stem);
  s.arch = spec::Arch::parse(arch);
  return s;
}

// In a fresh process: store hit + module load for the proof kernel, or the named one.
int warm_child(const char* name) {
  auto t0 = Clock::now();
  Runtime rt;
  const int dev = driver::current_device();
  auto info = driver::device_info(dev);
  const std::string arch = spec::arch_for_device(info.sm_major, info.sm_minor).str();
  spec::KernelSpec s = name ? extra_spec(name, arch) : proof_spec(arch);
  auto t1 = Clock::now();
  rt.registry().artifact(s);  // the store read (key, row, checksum)
  const double store_us = since_us(t1);
  rt.registry().kernel(s, dev, nullptr);
  double load_us = since_us(t1);
  auto st = rt.stats();
  fmt::print("warm start (new process{}{}): {:.2f} ms for store hit + module load ({:.2f} ms store read, {:.2f} ms "
             "module load; {:.2f} ms incl. runtime/context setup); compiles in this process: {}, store hits: {}\n",
             name ? ", " : "", name ? name : "", load_us / 1e3, store_us / 1e3, (load_us - store_us) / 1e3,
             since_us(t0) / 1e3, st.compiles, st.store_hits);
  return st.compiles == 0 ? 0 : 1;
}

int startup(const char* self) {
  // Make sure the store holds the proof kernel, then measure a new process.
  {
    Runtime rt;
    const int dev = driver::current_device();
    auto info = driver::device_info(dev);
    spec::KernelSpec s = proof_spec(spec::arch_for_device(info.sm_major, info.sm_minor).str());
    rt.registry().kernel(s, dev, nullptr);
    // In-process lookup on the launch path.
    const int n = 1000000;
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) rt.registry().kernel(s, dev, nullptr);
    fmt::print("in-process lookup: {:.1f} ns per call\n", since_us(t0) * 1e3 / n);
  }
  int rc = std::system(fmt::format("{} --warm-child", self).c_str());
  {
    Runtime rt;
    auto info = driver::device_info(driver::current_device());
    const std::string arch = spec::arch_for_device(info.sm_major, info.sm_minor).str();
    for (const char* extra : kWarmExtras) {
      const std::string key = rt.registry().key_of(extra_spec(extra, arch));
      if (rt.registry().store() && rt.registry().store()->contains(key))
        rc |= std::system(fmt::format("{} --warm-child {}", self, extra).c_str());
      else
        fmt::print("warm start of {}: not in the store, skipped\n", extra);
    }
  }
  // Host overhead per xqa launch: a tiny problem, timing only the calls.
  using testing::DeviceTensor;
  const int B = 1, KH = 8, G = 8, D = 128, P = 32, pps = 1;
  DeviceTensor q(DType::kBFloat16, {B, 1, KH * G, D}), o(DType::kBFloat16, {B, 1, KH * G, D});
  DeviceTensor k(DType::kBFloat16, {pps * B, P, KH, D}), v(DType::kBFloat16, {pps * B, P, KH, D});
  // Sized by the helper, as a caller would: a page of 32 tokens may plan two splits (the
  // short-sequence fill), whatever seq_lens holds.
  const int sms = driver::device_info(driver::current_device()).sm_count;
  DeviceTensor pt(DType::kInt32, {B, pps}), sl(DType::kUInt32, {B, 1}),
      ws(DType::kUInt8, {int64_t(std::max<size_t>(16, xqa_workspace_bytes(B, KH, G, 1, D, pps * P, sms)))}),
      sem(DType::kUInt32, {int64_t(xqa_semaphore_count(B, KH, G, 1))});
  q.zero(); k.zero(); v.zero(); sem.zero();
  pt.upload_pod(std::vector<int>{0});
  sl.upload_pod(std::vector<uint32_t>{16});
  XqaArgs a;
  a.q = q.view; a.k_cache = k.view; a.v_cache = v.view; a.page_table = pt.view; a.seq_lens = sl.view;
  a.output = o.view; a.workspace_buffer = ws.view; a.semaphores = sem.view; a.num_kv_heads = KH; a.page_size = P;
  xqa(a);
  driver::ctx_sync();
  fmt::print("host overhead per xqa launch: {:.2f} us (median of 50 bursts of 100)\n",
             bench::host_us_per_call([&] { xqa(a); }));
  // Where it goes: planning alone (validation, spec, backend) and the bare driver launch.
  const auto info = driver::device_caps(driver::current_device());
  const spec::Arch arch = spec::arch_for_device(info.sm_major, info.sm_minor);
  const double plan_us = bench::host_us_per_call([&] { ops::plan_xqa(a, arch); });
  // One launch through the op's own path fills in the split fields of the params;
  // then the same kernel, grid and params go straight to the driver.
  ops::XqaPlan plan = ops::plan_xqa(a, arch);
  ops::DecodeLaunch l;
  l.spec = &plan.spec;
  l.shape = plan.shape;
  l.workspace = a.workspace_buffer.data;
  l.workspace_bytes = plan.workspace_bytes;
  l.semaphores = static_cast<unsigned*>(a.semaphores.data);
  l.semaphore_count = plan.semaphore_count;
  l.pdl = info.sm_major >= 9;
  const unsigned splits = static_cast<unsigned>(ops::launch_decode(Runtime::global(), l, plan.params, nullptr));
  const runtime::LoadedKernel& kernel = Runtime::global().registry().kernel(plan.spec, driver::current_device(), nullptr);
  const ops::Grid grid{splits, static_cast<unsigned>(KH * plan.params.row_blocks), static_cast<unsigned>(B)};
  const double bare_us = bench::host_us_per_call([&] { ops::launch_kernel(kernel, grid, nullptr, l.pdl, plan.params); });
  fmt::print("  of which planning (validate, spec, backend) {:.2f} us; a bare cuLaunchKernelEx of the same kernel "
             "{:.2f} us\n", plan_us, bare_us);
  // The same on a stream of the caller's (engines launch on their own streams, not the
  // legacy default one, whose implicit ordering the driver pays for), and without PDL.
  CUstream own = driver::stream_create();
  const double own_us = bench::host_us_per_call([&] { xqa(a, own); });
  const double own_bare_us = bench::host_us_per_call([&] { ops::launch_kernel(kernel, grid, own, l.pdl, plan.params); });
  const double own_bare_nopdl_us = bench::host_us_per_call([&] { ops::launch_kernel(kernel, grid, own, false, plan.params); });
  fmt::print("host overhead per xqa launch on a non-blocking stream: {:.2f} us; bare launch there {:.2f} us, "
             "without PDL {:.2f} us\n", own_us, own_bare_us, own_bare_nopdl_us);
  // The rest of the gap between the call and the bare launch: the op's launch half (kernel
  // lookup, split plan, params) on a plan made once, and the current-device query.
  const double launch_half_us =
      bench::host_us_per_call([&] { ops::launch_decode(Runtime::global(), l, plan.params, own); });
  const double device_us = bench::host_us_per_call([&] { (void)driver::current_device(); });
  fmt::print("  of which launch_decode on a ready plan {:.2f} us, current_device() {:.3f} us\n", launch_half_us,
             device_us);
  driver::ctx_sync();
  driver::stream_destroy(own);
  return rc | bench::mla_host_overhead();
}

void print_table(const std::vector<bench::Result>& rs) {
  fmt::print("\n{:<18} {:<12} {:<14} {:>9} {:>8} {:>8}\n", "op", "shape", "dtype", "ms", "TB/s", "%roof");
  for (const auto& r : rs)
    fmt::print("{:<18} {:<12} {:<14} {:>9.4f} {:>8.2f} {:>7.1f}%\n", r.op, r.shape, r.dtype, r.ms, r.tbs(), r.pct());
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // whole lines even when piped and cut short
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto has = [&](const char* f) { return std::find(args.begin(), args.end(), f) != args.end(); };
    if (has("--compile")) return cold_compile(10, has("--sm80") ? "sm_80" : "sm_90a");
    if (has("--warm-child")) return warm_child(args.size() > 1 ? argv[2] : nullptr);
    if (has("--help")) {
      fmt::print("attnjit-bench [--compile] [--startup] [--xqa] [--single] [--window] [--fia] [--fia-prefill] [--fia-layouts] [--fia-decode] [--fia-mla] [--fia-quant] [--mla] [--iters N] [--batch N] [--len L] [--kv bf16|fp8_e4m3] [--layout BSND|BNSD] [--heads N] [--q-len N] [--backend xqa|trtllm-gen]\n");
      return 0;
    }
    driver::require_available();
    bench::Options o;
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--iters") o.iters = std::atoi(args[i + 1].c_str());
      else if (args[i] == "--batch") o.only_batch = std::atoi(args[i + 1].c_str());
      else if (args[i] == "--len") o.seq_len = std::atoi(args[i + 1].c_str());
      else if (args[i] == "--kv") o.only_kv = argv[i + 2];
      else if (args[i] == "--layout") o.layout = argv[i + 2];
      else if (args[i] == "--heads") o.only_heads = std::atoi(args[i + 1].c_str());
      else if (args[i] == "--backend") o.only_backend = argv[i + 2];
      else if (args[i] == "--q-len") o.only_q_len = std::atoi(args[i + 1].c_str());
    auto wanted = [&](DType kv) { return !o.only_kv || dtype_name(kv) == std::string(o.only_kv); };
    int rc = 0;
    if (has("--startup")) rc |= startup(argv[0]);
    if (has("--fia")) return rc | bench::bench_fia(o.iters);
    if (has("--fia-prefill")) return rc | bench::bench_fia(o.iters, true);  // the wgmma prefill rows only
    if (has("--fia-layouts")) return rc | bench::bench_fia_layouts(o);       // paged K/V and TND prefill
    if (has("--fia-decode")) return rc | bench::bench_fia_decode(o);  // only --fia's decode rows
    if (has("--fia-mla")) return rc | bench::bench_fia_mla(o);        // FIA's MLA beside batch_decode_mla
    if (has("--fia-quant")) return rc | bench::bench_fia_quant(o);    // quantised K/V beside 16-bit KV
    const bool all = !has("--xqa") && !has("--single") && !has("--window") && !has("--mla");
    std::vector<bench::Result> rs;
    if (all || has("--xqa"))
      for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
        if (!wanted(kv)) continue;
        auto r = bench::bench_xqa(kv, o);
        rs.insert(rs.end(), r.begin(), r.end());
      }
    if (all || has("--single"))
      for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
        if (!wanted(kv)) continue;
        auto r = bench::bench_single_decode(kv, o);
        rs.insert(rs.end(), r.begin(), r.end());
      }
    if (has("--mla")) {  // batch_decode_mla at issue 10's shapes (TB/s and TFLOP/s)
      auto r = bench::bench_mla(o);
      rs.insert(rs.end(), r.begin(), r.end());
    }
    if (has("--window"))  // sliding window vs a plain sequence of the window's length
      for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3}) {
        if (!wanted(kv)) continue;
        auto r = bench::bench_xqa_window(kv, o);
        auto r2 = bench::bench_single_decode_window(kv, o);
        r.insert(r.end(), r2.begin(), r2.end());
        for (const auto& x : r)
          if (x.plain_ms > 0)
            fmt::print("window {:<8} {:<13} {:<22} {:>8.2f} us  ratio to plain {:.3f} (goal <= 1.10)\n",
                       dtype_name(kv), x.op, x.shape, x.ms * 1e3, x.ms / x.plain_ms);
          else
            fmt::print("window {:<8} {:<13} {:<22} {:>8.2f} us  (plain)\n", dtype_name(kv), x.op, x.shape, x.ms * 1e3);
        rs.insert(rs.end(), r.begin(), r.end());
      }
    print_table(rs);
    return rc;
  } catch (const std::exception& e) {
    fmt::print(stderr, "attnjit-bench: {}\n", e.what());
    return 1;
  }
}
