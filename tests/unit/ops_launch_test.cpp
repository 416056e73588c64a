// Tests of src/ops/common/launch.hpp: the generic launch refuses what it cannot
// launch correctly before it touches the driver (so these run without a GPU).
#include <gtest/gtest.h>

#include <cstddef>
#include <iterator>

#include "common/expect_error.hpp"
#include "decode/decode_params.cuh"
#include "ops/common/launch.hpp"
#include "render/family.hpp"

namespace attnjit::ops {
namespace {

using testing::expect_error;

runtime::LoadedKernel decode_kernel() {
  runtime::LoadedKernel k;
  k.launch.threads = 128;
  k.params_bytes = render::find_family(spec::OpFamily::kXqa)->params_bytes;
  return k;
}

TEST(LaunchKernel, ParamsOfAnotherSizeAreRefused) {
  const runtime::LoadedKernel k = decode_kernel();
  EXPECT_EQ(k.params_bytes, sizeof(DecodeParams)) << "the xqa family registers DecodeParams";
  struct OtherParams {
    int x;
  } other{};
  expect_error([&] { launch_kernel(k, Grid{}, nullptr, false, other); }, ErrorCode::kInternal,
               {std::to_string(sizeof(DecodeParams)) + "-byte Params", std::to_string(sizeof(OtherParams))});
}

TEST(LaunchKernel, ClusterDimsNeedTheClusterLaunch) {
  runtime::LoadedKernel k = decode_kernel();
  k.launch.cluster[0] = 2;
  DecodeParams p{};
  expect_error([&] { launch_kernel(k, Grid{}, nullptr, false, p); }, ErrorCode::kUnsupported, {"cluster"});
}

TEST(Families, EveryFamilyIsRegisteredOnce) {
  // Every line of families.def, so a new family's line is checked without editing this test.
  static const spec::OpFamily kAll[] = {
#define ATTNJIT_FAMILY(id, token, ns) spec::OpFamily::id,
#include "spec/families.def"
#undef ATTNJIT_FAMILY
  };
  for (auto f : kAll) {
    const render::Family* fam = render::find_family(f);
    ASSERT_NE(fam, nullptr) << spec::to_string(f);
    EXPECT_EQ(fam->id, f);
    EXPECT_NE(fam->can_implement, nullptr);
    EXPECT_NE(fam->generate, nullptr);
    EXPECT_NE(fam->backends, nullptr);
    EXPECT_GT(fam->params_bytes, 0u);
  }
  EXPECT_EQ(render::families_end() - render::families_begin(), static_cast<std::ptrdiff_t>(std::size(kAll)));
}

}  // namespace
}  // namespace attnjit::ops
