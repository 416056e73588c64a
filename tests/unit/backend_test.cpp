// Tests of src/runtime/backend: auto selection by arch and clear errors for impossible choices.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/expect_error.hpp"
#include "attnjit/error.hpp"
#include "attnjit/types.hpp"
#include "runtime/backend.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::runtime {
namespace {

using spec::Arch;
using spec::KernelSpec;

using testing::expect_error;

KernelSpec spec_for(Arch arch, spec::OpFamily family = spec::OpFamily::kXqa) {
  KernelSpec s;
  s.family = family;
  s.page_size = family == spec::OpFamily::kXqa ? 32 : 0;
  s.group_size = 8;
  s.arch = arch;
  s.backend = spec::Backend::kTrtllmGen;  // select_backend must overwrite it
  return s;
}

TEST(SelectBackend, AutoPicksXqaOnEveryArch) {
  for (Arch a : {Arch{80, false}, Arch{86, false}, Arch{89, false}, Arch{90, true}, Arch{90, false},
                 Arch{100, true}, Arch{120, false}})
    for (auto family : {spec::OpFamily::kXqa, spec::OpFamily::kDecode}) {
      KernelSpec s = spec_for(a, family);
      select_backend(BackendChoice::kAuto, s);
      EXPECT_EQ(s.backend, spec::Backend::kXqa) << a.str() << " " << spec::to_string(family)
                                                << ": trtllm-gen has no kernels yet";
    }
}

TEST(SelectBackend, ExplicitXqaWorksFromSm80) {
  for (Arch a : {Arch{80, false}, Arch{90, true}, Arch{120, false}}) {
    KernelSpec s = spec_for(a);
    select_backend(BackendChoice::kXqa, s);
    EXPECT_EQ(s.backend, spec::Backend::kXqa);
  }
}

TEST(SelectBackend, XqaBelowSm80IsUnsupported) {
  // Arch::parse refuses sm_75, but a hand-built spec can still carry it.
  KernelSpec s = spec_for(Arch{75, false});
  expect_error([&] { select_backend(BackendChoice::kXqa, s); }, ErrorCode::kUnsupported,
               {"xqa", "sm_80"});
  expect_error([&] { select_backend(BackendChoice::kAuto, s); }, ErrorCode::kUnsupported, {"auto", "sm_80"});
}

TEST(SelectBackend, ExplicitTrtllmGenOnSm90aHasNoKernelsYet) {
  KernelSpec s = spec_for(Arch{90, true});
  s.backend = spec::Backend::kXqa;
  expect_error([&] { select_backend(BackendChoice::kTrtllmGen, s); }, ErrorCode::kUnsupported,
               {"trtllm-gen", "no xqa kernels"});
  EXPECT_EQ(s.backend, spec::Backend::kXqa) << "a refused choice leaves the spec alone";
  KernelSpec d = spec_for(Arch{90, true}, spec::OpFamily::kDecode);
  expect_error([&] { select_backend(BackendChoice::kTrtllmGen, d); }, ErrorCode::kUnsupported,
               {"trtllm-gen", "no decode kernels"});
}

TEST(SelectBackend, ExplicitTrtllmGenOffSm90aNamesTheArch) {
  for (Arch a : {Arch{80, false}, Arch{89, false}, Arch{90, false}, Arch{100, true}, Arch{120, false}}) {
    KernelSpec s = spec_for(a);
    expect_error([&] { select_backend(BackendChoice::kTrtllmGen, s); }, ErrorCode::kUnsupported,
                 {"trtllm-gen", "sm_90a", a.str()});
  }
}

TEST(BackendSupports, ReasonOnlyWhenAsked) {
  KernelSpec s = spec_for(Arch{80, false});
  std::string why;
  EXPECT_TRUE(backend_supports(spec::Backend::kXqa, s, &why));
  EXPECT_FALSE(backend_supports(spec::Backend::kTrtllmGen, s, &why));
  EXPECT_NE(why.find("sm_80"), std::string::npos) << why;
  EXPECT_FALSE(backend_supports(spec::Backend::kTrtllmGen, s, nullptr));
}

TEST(BackendChoiceParse, AcceptsKnownNames) {
  EXPECT_EQ(parse_backend_choice("auto"), BackendChoice::kAuto);
  EXPECT_EQ(parse_backend_choice("xqa"), BackendChoice::kXqa);
  EXPECT_EQ(parse_backend_choice("trtllm-gen"), BackendChoice::kTrtllmGen);
  for (BackendChoice c : {BackendChoice::kAuto, BackendChoice::kXqa, BackendChoice::kTrtllmGen})
    EXPECT_EQ(parse_backend_choice(to_string(c)), c);
}

TEST(BackendChoiceParse, RejectsOthersNamingTheArgument) {
  for (const char* bad : {"", "AUTO", "trtllm", "cutlass", "fa3", " xqa"})
    expect_error([&] { parse_backend_choice(bad); }, ErrorCode::kInvalidArgument,
                 {"backend", std::string("\"") + bad + "\"", "auto", "trtllm-gen"});
}

TEST(BackendChoice, MatchesThePublicEnum) {
  // The ops cast attnjit::Backend to BackendChoice.
  EXPECT_EQ(static_cast<BackendChoice>(attnjit::Backend::kAuto), BackendChoice::kAuto);
  EXPECT_EQ(static_cast<BackendChoice>(attnjit::Backend::kXqa), BackendChoice::kXqa);
  EXPECT_EQ(static_cast<BackendChoice>(attnjit::Backend::kTrtllmGen), BackendChoice::kTrtllmGen);
}

}  // namespace
}  // namespace attnjit::runtime
