// `attnjit prewarm`: expand a model config, compile every variant into the store
// on N threads, show progress and a summary (see prewarm.hpp).
#include "cli/prewarm.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <thread>

#include "attnjit/error.hpp"
#include "cli/context.hpp"
#include "cli/spec_parse.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit::cli {

namespace {

int terminal_width() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
  return 80;
}

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line;
}

class ProgressDisplay {
 public:
  ProgressDisplay(Progress mode, size_t total) : mode_(mode), total_(total), width_(terminal_width()) {
    if (mode_ == Progress::kBar) draw("");
  }
  void done(const PrewarmItem& item) {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    if (mode_ == Progress::kLines) {
      const int digits = static_cast<int>(std::to_string(total_).size());
      std::string line = fmt::format("[{:>{}}/{}] {:<8} {}", count_, digits, total_, item.origin, item.name);
      if (item.origin == "compiled") line += fmt::format(" ({:.0f} ms)", item.compile_ms);
      if (item.origin == "failed") line += ": " + first_line(item.error);
      std::cerr << line << std::endl;
    } else if (mode_ == Progress::kBar) {
      if (item.origin == "failed") std::cerr << "\r\033[K" << "failed " << item.name << ": " << first_line(item.error) << "\n";
      draw(item.name);
    }
  }
  void finish() {
    if (mode_ == Progress::kBar) std::cerr << "\r\033[K" << std::flush;
  }

 private:
  void draw(const std::string& last) {
    const int bar = 30;
    const int filled = total_ ? static_cast<int>(bar * count_ / total_) : bar;
    std::string line = fmt::format("[{}{}] {}/{} {}", std::string(filled, '#'), std::string(bar - filled, '.'),
                                   count_, total_, last);
    if (static_cast<int>(line.size()) > width_ - 1) line.resize(width_ - 1);
    std::cerr << "\r\033[K" << line << std::flush;
  }

  Progress mode_;
  size_t total_, count_ = 0;
  int width_;
  std::mutex mu_;
};

}  // namespace

Progress progress_mode(bool quiet) {
  if (quiet) return Progress::kNone;
  return is_tty(STDERR_FILENO) ? Progress::kBar : Progress::kLines;
}

PrewarmResult prewarm_specs(Runtime& rt, const std::vector<spec::KernelSpec>& specs, int jobs,
                            Progress progress) {
  PrewarmResult result;
  result.items.resize(specs.size());
  if (jobs <= 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::min<int>(jobs, static_cast<int>(std::max<size_t>(1, specs.size())));
  const auto t0 = std::chrono::steady_clock::now();
  ProgressDisplay display(progress, specs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < specs.size(); i = next++) {
      PrewarmItem& item = result.items[i];
      item.name = specs[i].name();
      try {
        runtime::Origin origin = runtime::Origin::kMemory;
        const runtime::Artifact& a = rt.registry().artifact(specs[i], &origin);
        item.key = a.key;
        item.compile_ms = a.compile_ms;
        item.origin = origin == runtime::Origin::kCompiled ? "compiled" : "present";
      } catch (const std::exception& e) {
        item.origin = "failed";
        item.error = e.what();
      }
      display.done(item);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < jobs; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  display.finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& item : result.items) {
    if (item.origin == "compiled") ++result.compiled;
    else if (item.origin == "present") ++result.present;
    else ++result.failed;
  }
  return result;
}

void print_prewarm_summary(const ModelPlan& plan, const PrewarmResult& r) {
  for (const auto& s : plan.skipped) std::cout << fmt::format("skipping op '{}': {}\n", s.op, s.reason);
  for (const auto& item : r.items)
    if (item.origin == "failed") std::cout << "failed " << item.name << ":\n  " << item.error << "\n";
  std::cout << fmt::format("prewarm {}: {} kernels: {} compiled, {} already present, {} failed in {:.1f} s\n",
                           plan.model, r.items.size(), r.compiled, r.present, r.failed, r.seconds);
  std::cout << std::flush;
}

nlohmann::json prewarm_json(const ModelPlan& plan, const PrewarmResult& r, const std::vector<spec::Arch>& archs) {
  nlohmann::json j;
  j["model"] = plan.model;
  j["config"] = plan.source;
  j["archs"] = nlohmann::json::array();
  for (const auto& a : archs) j["archs"].push_back(a.str());
  j["total"] = r.items.size();
  j["compiled"] = r.compiled;
  j["present"] = r.present;
  j["failed"] = r.failed;
  j["seconds"] = r.seconds;
  j["skipped"] = nlohmann::json::array();
  for (const auto& s : plan.skipped) j["skipped"].push_back({{"op", s.op}, {"reason", s.reason}});
  j["kernels"] = nlohmann::json::array();
  for (const auto& item : r.items) {
    nlohmann::json k = {{"name", item.name}, {"key", item.key}, {"origin", item.origin},
                        {"compile_ms", item.compile_ms}};
    if (!item.error.empty()) k["error"] = item.error;
    j["kernels"].push_back(k);
  }
  return j;
}

namespace {

// --spec values: each for every --arch given, else with its own arch (or the default one).
void add_specs(ModelPlan& plan, const std::vector<std::string>& texts, const std::vector<spec::Arch>& archs) {
  std::vector<spec::KernelSpec> specs;
  for (const auto& t : texts) {
    if (archs.empty()) specs.push_back(spec_from_text(t, std::nullopt, default_arch()));
    for (const auto& a : archs) specs.push_back(spec_from_text(t, a));
  }
  for (const auto& s : specs)
    if (std::find(plan.specs.begin(), plan.specs.end(), s) == plan.specs.end()) plan.specs.push_back(s);
}

}  // namespace

void add_prewarm_command(CLI::App& app, Context& ctx) {
  struct Options {
    std::string config;
    std::vector<std::string> specs, archs;
    int jobs = 0;
    bool json = false, quiet = false, list = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("prewarm", "Compile every kernel a model config (or --spec) needs into the store");
  sub->add_option("-c,--config", o->config, "Model config: a JSON file, or a bundled name (llama-3-8b, ...)");
  sub->add_option("-s,--spec", o->specs, "A kernel name or spec JSON to prewarm too (repeatable)");
  sub->add_option("-a,--arch", o->archs, "Target arch(s), e.g. sm_90a (repeat or comma-separate); "
                                         "default: the GPU's, else sm_90a");
  sub->add_option("-j,--jobs", o->jobs, "Compile threads (default: hardware concurrency)")
      ->check(CLI::Range(0, 4096));
  sub->add_flag("--json", o->json, "Print the summary as JSON");
  sub->add_flag("-q,--quiet", o->quiet, "No progress output");
  sub->add_flag("--list", o->list, "Only list the kernels the config expands to; compile nothing");
  sub->callback([&ctx, o] {
    ctx.action = [&ctx, o]() -> int {
      if (o->config.empty() && o->specs.empty())
        throw UsageError("prewarm: give a model config (--config FILE|NAME) and/or kernels (--spec NAME|JSON)");
      const std::vector<spec::Arch> archs = parse_archs(o->archs);
      ModelPlan plan;
      plan.model = "specs";
      if (!o->config.empty()) {
        plan = load_model_plan(o->config, archs);
      }
      add_specs(plan, o->specs, o->archs.empty() ? std::vector<spec::Arch>{} : archs);
      if (o->list) {
        for (const auto& s : plan.skipped) std::cerr << fmt::format("skipping op '{}': {}\n", s.op, s.reason);
        nlohmann::json j = nlohmann::json::array();
        for (const auto& s : plan.specs) {
          nlohmann::json e = s.to_json();
          e["name"] = s.name();  // what inspect and cache ls call it
          j.push_back(o->json ? e : nlohmann::json(s.name()));
        }
        if (o->json) print_json({{"model", plan.model}, {"specs", j}});
        else
          for (const auto& s : plan.specs) std::cout << s.name() << "\n";
        return kExitOk;
      }
      Runtime& rt = ctx.runtime();
      // Prewarming exists to fill the cache file: compiling into memory helps no one.
      auto* st = rt.registry().store();
      if (!st) throw Error(ErrorCode::kStore, "prewarm: the runtime has no cubin store: nothing would persist");
      require_file_backed(st->stats(), "prewarm");
      if (!o->json)
        for (const auto& s : plan.skipped) std::cout << fmt::format("skipping op '{}': {}", s.op, s.reason) << std::endl;
      PrewarmResult r = prewarm_specs(rt, plan.specs, o->jobs, progress_mode(o->quiet));
      // A put that failed (a full disk, a lost lock) leaves the kernel in memory only: for
      // prewarm, whose job is the file, that is a failure.
      for (auto& item : r.items) {
        if (item.origin != "compiled" || st->contains(item.key)) continue;
        const std::string why = st->stats().write_error;
        item.origin = "failed";
        item.error = "compiled, but the store did not keep it: " + (why.empty() ? std::string("unknown") : why);
        --r.compiled;
        ++r.failed;
      }
      // The runtime's connection stays open until exit, so SQLite never folds the -wal
      // into the file: do it now, so that the file alone (copied, shipped) holds the entries.
      if (!st->checkpoint())
        std::cerr << "attnjit: note: could not fold " << st->path() << "-wal into the file now (another process "
                  << "is reading it, or the warning above); its entries move there when the last process closes it\n";
      if (o->json) print_json(prewarm_json(plan, r, archs));
      else {
        plan.skipped.clear();  // already said above
        print_prewarm_summary(plan, r);
      }
      return r.failed ? kExitFailure : kExitOk;
    };
  });
}

}  // namespace attnjit::cli
