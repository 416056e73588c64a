// Tests of src/runtime/backend: auto selection by arch and clear errors for impossible choices.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/expect_error.hpp"
#include "attnjit/error.hpp"
#include "attnjit/types.hpp"
#include "render/family.hpp"
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
                                                << ": no trtllm-gen kernel has run on a GPU yet";
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

// The launch path remembers each decision: the second call for a spec must answer as
// the first, for every choice, and a remembered success for one choice must not
// leak into another (auto and xqa serve this spec; trtllm-gen is refused).
TEST(SelectBackend, RememberedDecisionsAnswerAsTheFirst) {
  for (int round = 0; round < 2; ++round) {
    KernelSpec s = spec_for(Arch{90, true});
    select_backend(BackendChoice::kAuto, s);
    EXPECT_EQ(s.backend, spec::Backend::kXqa) << "round " << round;
    s.backend = spec::Backend::kTrtllmGen;
    select_backend(BackendChoice::kXqa, s);
    EXPECT_EQ(s.backend, spec::Backend::kXqa) << "round " << round;
    expect_error([&] { select_backend(BackendChoice::kTrtllmGen, s); }, ErrorCode::kUnsupported,
                 {"backend trtllm-gen"});
    // A refusal is never remembered as a success, either.
    KernelSpec old = spec_for(Arch{75, false});
    expect_error([&] { select_backend(BackendChoice::kAuto, old); }, ErrorCode::kUnsupported, {"auto", "sm_80"});
  }
}

// Today no trtllm-gen decode kernel has run on a GPU, so it is available nowhere:
// an explicit request is a clear error naming the backend, on every arch.
TEST(SelectBackend, ExplicitTrtllmGenIsAnErrorWhereNoKernelHasRun) {
  for (Arch a : {Arch{80, false}, Arch{89, false}, Arch{90, true}, Arch{100, true}, Arch{103, true}, Arch{120, false}})
    for (auto family : {spec::OpFamily::kXqa, spec::OpFamily::kDecode}) {
      KernelSpec s = spec_for(a, family);
      s.backend = spec::Backend::kXqa;
      expect_error([&] { select_backend(BackendChoice::kTrtllmGen, s); }, ErrorCode::kUnsupported,
                   {"backend trtllm-gen", "has run correctly on a GPU", a.str(), spec::to_string(family)});
      EXPECT_EQ(s.backend, spec::Backend::kXqa) << "a refused choice leaves the spec alone";
    }
}

// The old gate allowed trtllm-gen only on sm_90a, against the MLA seed. The
// table now prefers it on sm_100/sm_103 and says why auto still takes xqa there.
TEST(DecideBackend, AutoExplainsTheTableAndTheFallback) {
  for (Arch a : {Arch{100, true}, Arch{103, true}}) {
    const KernelSpec s = spec_for(a);
    const BackendDecision d = decide_backend(*render::find_family(s.family), BackendChoice::kAuto, s);
    EXPECT_EQ(d.backend, spec::Backend::kXqa);
    for (const std::string& needle : {std::string("MLA seed"), "prefers trtllm-gen on " + a.str(),
                                      std::string("has run correctly on a GPU"), std::string("using xqa")})
      EXPECT_NE(d.why.find(needle), std::string::npos) << a.str() << ": " << d.why;
  }
  const KernelSpec s120 = spec_for(Arch{120, false});
  const BackendDecision d120 = decide_backend(*render::find_family(s120.family), BackendChoice::kAuto, s120);
  EXPECT_EQ(d120.backend, spec::Backend::kXqa);
  EXPECT_NE(d120.why.find("prefers xqa on sm_120 (the MLA seed)"), std::string::npos) << d120.why;
  const KernelSpec s90 = spec_for(Arch{90, true});
  const BackendDecision d90 = decide_backend(*render::find_family(s90.family), BackendChoice::kAuto, s90);
  EXPECT_EQ(d90.backend, spec::Backend::kXqa);
  EXPECT_NE(d90.why.find("measured faster"), std::string::npos) << d90.why;
}

// The table logic itself, on a family whose trtllm-gen kernels have run on
// sm_100 only and that serves every spec: auto follows the seed where the kernel
// is verified, falls back to xqa where it is not, and sm_90a asks the measurement.
bool serves_all(const KernelSpec&, const Arch&, std::string*) { return true; }
spec::Backend trtllm_measured_faster(const KernelSpec&, const char** why) {
  if (why) *why = "measured";
  return spec::Backend::kTrtllmGen;
}

TEST(DecideBackend, FollowsTheTableWhereAKernelIsVerified) {
  const render::BackendRow rows[] = {
      {90, spec::Backend::kXqa, true, "sm_90a: measured"},
      {100, spec::Backend::kTrtllmGen, false, "seed: sm_100"},
      {103, spec::Backend::kTrtllmGen, false, "seed: sm_103"},
      {120, spec::Backend::kXqa, false, "seed: sm_120"},
      {0, spec::Backend::kXqa, false, "portable"},
  };
  const render::VerifiedBackend verified[] = {{spec::Backend::kXqa, 0}, {spec::Backend::kTrtllmGen, 100},
                                              {spec::Backend::kTrtllmGen, 90}};
  const render::BackendTable table = {rows, 5, verified, 3, trtllm_measured_faster};
  render::Family f{};
  f.id = spec::OpFamily::kXqa;
  f.can_implement = serves_all;
  f.backends = &table;
  auto pick = [&](Arch a, BackendChoice c) { return decide_backend(f, c, spec_for(a)).backend; };
  EXPECT_EQ(pick(Arch{100, true}, BackendChoice::kAuto), spec::Backend::kTrtllmGen);
  EXPECT_EQ(pick(Arch{103, true}, BackendChoice::kAuto), spec::Backend::kXqa) << "no verified sm_103 kernel";
  EXPECT_EQ(pick(Arch{120, false}, BackendChoice::kAuto), spec::Backend::kXqa);
  EXPECT_EQ(pick(Arch{90, true}, BackendChoice::kAuto), spec::Backend::kTrtllmGen) << "the measured-faster one";
  EXPECT_EQ(pick(Arch{80, false}, BackendChoice::kAuto), spec::Backend::kXqa);
  EXPECT_EQ(pick(Arch{100, true}, BackendChoice::kTrtllmGen), spec::Backend::kTrtllmGen);
  EXPECT_EQ(pick(Arch{100, true}, BackendChoice::kXqa), spec::Backend::kXqa);
  expect_error([&] { pick(Arch{120, false}, BackendChoice::kTrtllmGen); }, ErrorCode::kUnsupported,
               {"backend trtllm-gen", "sm_120"});
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
