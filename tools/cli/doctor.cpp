// `attnjit doctor`: what this machine has (GPUs, driver, NVRTC, tools) and the
// state of the cubin store (path, entries, size, health). Works without a GPU.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <regex>
#include <vector>

#include "attnjit/error.hpp"
#include "cli/context.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "driver/cuda_driver.hpp"
#include "render/family.hpp"
#include "render/renderer.hpp"
#include "runtime/backend.hpp"

namespace attnjit::cli {

namespace {

nlohmann::json gpu_json() {
  nlohmann::json g;
  std::string reason;
  const bool available = driver::is_available(&reason);
  g["available"] = available && driver::device_count() > 0;
  g["reason"] = available ? (driver::device_count() > 0 ? "" : "the driver reports no device") : reason;
  g["driver_version"] = driver::driver_version();
  g["devices"] = nlohmann::json::array();
  if (available)
    for (int i = 0; i < driver::device_count(); ++i) {
      const auto d = driver::device_info(i);
      g["devices"].push_back({{"ordinal", d.ordinal},
                              {"name", d.name},
                              {"compute_capability", fmt::format("{}.{}", d.sm_major, d.sm_minor)},
                              {"arch", spec::arch_for_device(d.sm_major, d.sm_minor).str()},
                              {"sm_count", d.sm_count},
                              {"memory_bytes", d.total_mem},
                              {"l2_bytes", d.l2_bytes}});
    }
  return g;
}

// What doctor says when opening the store quarantined a corrupt file, from its note
// ("quarantined <db> (<why>) as <db>.corrupt-<time>-<pid>"); "" when it did not.
std::string quarantine_health(const std::string& note, std::string* moved_to) {
  if (note.find("quarantined") == std::string::npos) return "";
  static const std::regex moved(R"( as (\S+\.corrupt-[0-9]+-[0-9]+))");
  std::smatch m;
  if (!std::regex_search(note, m, moved)) return "corrupt (" + note + ")";
  *moved_to = m[1].str();
  return "corrupt (quarantined to " + *moved_to + ")";
}

nlohmann::json cache_json(const Context& ctx) {
  nlohmann::json c;
  c["dir"] = ctx.resolved_cache_dir();
  try {
    // Diagnose only: a missing folder or file stays missing.
    auto st = ctx.open_store(0, /*create=*/false);
    const auto v = st->verify(false);
    const auto s = st->stats();  // after verify: its note also says what verify found
    c["path"] = s.path;
    c["entries"] = s.entries;
    c["bytes"] = s.total_bytes;
    c["in_memory"] = s.in_memory;
    c["note"] = s.note;
    c["checked"] = v.checked;
    c["bad"] = v.bad;
    c["integrity_ok"] = v.integrity_ok;
    std::string moved;
    const std::string quarantined = quarantine_health(s.note, &moved);
    if (!moved.empty()) c["quarantined_to"] = moved;
    // A quarantine by an earlier process leaves this store healthy, but the damaged file
    // (and whatever caused it) is still worth a look.
    const std::string db = store_db_path();
    const int quarantined_files = quarantine_files(db);
    c["quarantine_files"] = quarantined_files;
    if (quarantined_files) c["quarantine_note"] = quarantine_note(db, quarantined_files);
    // Only "ok" is healthy: a store in memory loses every kernel with the process.
    c["created"] = !s.not_created;
    const std::string cannot_create = s.not_created ? creatable_problem(c["dir"].get<std::string>()) : "";
    c["health"] = !quarantined.empty() ? quarantined
                  : !v.problems.empty() ? "damaged: " + v.problems.front()
                  : s.not_created      ? (cannot_create.empty() ? "ok" : "unusable: not file-backed: " + cannot_create)
                  : !v.integrity_ok    ? "integrity check failed: run `attnjit cache verify --repair`"
                  : v.bad ? fmt::format("{} entries fail their checksum: run `attnjit cache verify --repair`", v.bad)
                  : s.in_memory        ? "unusable: not file-backed, in memory (" + s.note + ")"
                                       : "ok";
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.rfind("attnjit: ", 0) == 0) what.erase(0, 9);
    c["health"] = "error: " + what;
  }
  return c;
}

// What `auto` picks per family on `arch`, and why: the family's backend table,
// and which backends have kernels that have run correctly on a GPU.
nlohmann::json backends_json(const std::vector<spec::Arch>& archs) {
  nlohmann::json out = nlohmann::json::array();
  for (const spec::Arch& arch : archs) {
    for (auto it = render::families_begin(); it != render::families_end(); ++it) {
      spec::KernelSpec s;
      s.family = (*it)->id;
      s.arch = arch;
      if (s.family == spec::OpFamily::kMla) {  // the default spec's shapes are not MLA's
        s.head_dim_qk = 576;
        s.head_dim_vo = 512;
        s.page_size = 64;
        s.mask = spec::MaskMode::kCausal;
      }
      nlohmann::json row = {{"family", spec::to_string(s.family)}, {"arch", arch.str()}};
      try {
        const runtime::BackendDecision d = runtime::decide_backend(**it, runtime::BackendChoice::kAuto, s);
        row["auto"] = spec::to_string(d.backend);
        row["why"] = d.why;
      } catch (const Error& e) {
        row["auto"] = nullptr;
        row["why"] = e.what();
      }
      out.push_back(row);
    }
  }
  return out;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

void add_doctor_command(CLI::App& app, Context& ctx) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("doctor", "Check GPUs, driver, NVRTC and the cubin store");
  sub->add_flag("--json", *json, "Print JSON");
  sub->callback([&ctx, json] {
    ctx.action = [&ctx, json]() -> int {
      nlohmann::json j;
      j["library_version"] = ATTNJIT_VERSION;
      j["nvrtc_version"] = compile::nvrtc_version();
      j["template_hash"] = render::template_hash();
      j["gpu"] = gpu_json();
      std::string why;
      j["default_arch"] = default_arch(&why).str();
      j["default_arch_reason"] = why;
      // This machine's arch, and sm_100a, where the MLA seed prefers trtllm-gen.
      std::vector<spec::Arch> archs = {default_arch()};
      if (!(archs[0] == spec::Arch{100, true})) archs.push_back(spec::Arch{100, true});
      j["backends"] = backends_json(archs);
      j["cache"] = cache_json(ctx);
      const std::string cuobjdump = find_program("cuobjdump"), nvdisasm = find_program("nvdisasm");
      j["tools"] = {{"cuobjdump", cuobjdump.empty() ? nlohmann::json() : nlohmann::json(cuobjdump)},
                    {"nvdisasm", nvdisasm.empty() ? nlohmann::json() : nlohmann::json(nvdisasm)}};
      j["env"] = {{"ATTNJIT_CACHE_DIR", env_or("ATTNJIT_CACHE_DIR", "")},
                  {"XDG_CACHE_HOME", env_or("XDG_CACHE_HOME", "")},
                  {"ATTNJIT_LOG_LEVEL", env_or("ATTNJIT_LOG_LEVEL", "")},
                  {"ATTNJIT_TEMPLATE_DIR", env_or("ATTNJIT_TEMPLATE_DIR", "")}};
      const bool healthy = j["cache"]["health"] == "ok";
      j["ok"] = healthy;
      if (*json) {
        print_json(j);
        return healthy ? kExitOk : kExitFailure;
      }
      std::cout << fmt::format("attnjit {}\n", ATTNJIT_VERSION);
      const auto& g = j["gpu"];
      if (g["available"].get<bool>()) {
        const int dv = g["driver_version"].get<int>();
        std::cout << fmt::format("driver:     CUDA {}.{}\n", dv / 1000, (dv % 1000) / 10);
        for (const auto& d : g["devices"])
          std::cout << fmt::format("gpu {}:      {} (sm {}, {}, {} SMs, {})\n", d["ordinal"].get<int>(),
                                   d["name"].get<std::string>(), d["compute_capability"].get<std::string>(),
                                   d["arch"].get<std::string>(), d["sm_count"].get<int>(),
                                   human_bytes(d["memory_bytes"].get<int64_t>()));
      } else {
        std::cout << "gpu:        no GPU: " << g["reason"].get<std::string>() << "\n";
      }
      std::cout << fmt::format("nvrtc:      {}\n", j["nvrtc_version"].get<std::string>())
                << fmt::format("templates:  {}{}\n", j["template_hash"].get<std::string>(),
                               env_or("ATTNJIT_TEMPLATE_DIR", "")[0] ? " (from $ATTNJIT_TEMPLATE_DIR)" : " (embedded)")
                << fmt::format("arch:       {} ({})\n", j["default_arch"].get<std::string>(), why);
      for (const auto& b : j["backends"])
        std::cout << fmt::format("backend:    {} on {}: auto picks {} ({})\n", b["family"].get<std::string>(),
                                 b["arch"].get<std::string>(), b["auto"].is_null() ? "none" : b["auto"].get<std::string>(),
                                 b["why"].get<std::string>());
      const auto& c = j["cache"];
      std::cout << fmt::format("cache dir:  {}\n", c["dir"].get<std::string>());
      if (c.contains("path"))
        std::cout << fmt::format("cache:      {} ({} entries, {})\n", c["path"].get<std::string>(),
                                 c["entries"].get<int64_t>(), human_bytes(c["bytes"].get<int64_t>()));
      std::cout << fmt::format("health:     {}{}\n", c["health"].get<std::string>(),
                               healthy && !c.value("created", true) ? " (no store yet: the first prewarm or op creates it)"
                                                                    : "");
      if (c.contains("quarantine_note")) std::cout << "note:       " << c["quarantine_note"].get<std::string>() << "\n";
      std::cout << fmt::format("sass tools: {}\n", !cuobjdump.empty() ? cuobjdump
                                                 : !nvdisasm.empty()  ? nvdisasm
                                                                      : "none (cuobjdump/nvdisasm not found)");
      return healthy ? kExitOk : kExitFailure;
    };
  });
}

}  // namespace attnjit::cli
