// Compiles kernel specs with NVRTC on two threads and expects each to build with no
// spills, no stack frame and no serialised wgmma, printing each one's resources under
// `title`; returns the results (empty where a spec failed to compile) for more checks.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "attnjit/error.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::testing {

inline std::vector<compile::CompileResult> expect_compiles_without_spills(const std::vector<spec::KernelSpec>& specs, const char* title) {
  std::vector<compile::CompileResult> results(specs.size());
  std::vector<std::string> errors(specs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < specs.size();) {
      try {
        results[i] = compile::compile(specs[i].name(), render::render(specs[i]), specs[i].arch);
      } catch (const CompileError& e) {
        errors[i] = std::string(e.what()) + "\n" + e.log();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  std::printf("%s:\n", title);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!errors[i].empty()) {
      ADD_FAILURE() << specs[i].name() << ":\n" << errors[i];
      continue;
    }
    const auto& r = results[i].resources;
    std::printf("  %-70s regs %3d stack %3d spill %3d/%3d\n", specs[i].name().c_str(), r.registers, r.stack_bytes,
                r.spill_stores, r.spill_loads);
    EXPECT_EQ(r.spill_stores, 0) << specs[i].name() << "\n" << results[i].log;
    EXPECT_EQ(r.spill_loads, 0) << specs[i].name() << "\n" << results[i].log;
    EXPECT_EQ(r.stack_bytes, 0) << specs[i].name() << "\n" << results[i].log;
    // ptxas C7510: a wgmma pipeline crosses a call, and every wgmma is serialised (right, slow).
    EXPECT_EQ(results[i].log.find("C7510"), std::string::npos) << specs[i].name() << "\n" << results[i].log;
  }
  return results;
}

}  // namespace attnjit::testing
