// Random KernelSpecs, as a CLI user or a model config could ask for them: the
// renderer either refuses one with a clear error (kUnsupported or kInvalidArgument)
// or renders source that NVRTC compiles. A spec that renders and then fails to
// compile is a hole in the renderer's checks.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "attnjit/error.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "render/renderer.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::render {
namespace {

using spec::KernelSpec;

template <class T, size_t N>
T pick(std::mt19937_64& rng, const T (&xs)[N]) {
  return xs[rng() % N];
}

KernelSpec random_spec(std::mt19937_64& rng) {
  static const int kHeadDims[] = {-16, 0, 8, 16, 24, 48, 64, 96, 128, 160, 192, 256, 272, 512, 1 << 20};
  static const int kGroups[] = {-1, 0, 1, 2, 3, 4, 5, 8, 16, 17, 64, 65, 128, 256, 257, 1 << 20};
  static const int kPages[] = {-16, 0, 0, 8, 16, 32, 48, 64, 128, 256, 1 << 20};
  static const spec::Arch kArchs[] = {{80, false}, {86, false}, {89, false}, {90, true},
                                      {90, false}, {100, true}, {120, false}, {75, false}};
  KernelSpec s;
  s.family = static_cast<spec::OpFamily>(rng() % 3);
  s.backend = static_cast<spec::Backend>(rng() % 3);
  s.q_dtype = static_cast<DType>(rng() % 12);
  s.kv_dtype = rng() % 2 ? s.q_dtype : static_cast<DType>(rng() % 12);
  s.out_dtype = rng() % 2 ? s.q_dtype : static_cast<DType>(rng() % 12);
  s.set_head_dim(pick(rng, kHeadDims));
  if (rng() % 4 == 0) s.head_dim_vo = pick(rng, kHeadDims);  // MLA/FIA-style unequal dims
  s.group_size = pick(rng, kGroups);
  s.page_size = pick(rng, kPages);
  s.layout = static_cast<spec::KvLayout>(rng() % 3);
  s.mask = static_cast<spec::MaskMode>(rng() % 4);
  s.pos_encoding = static_cast<spec::PosEncoding>(rng() % 4);
  s.features = static_cast<uint32_t>(rng() % 160);  // past kAll too
  s.arch = pick(rng, kArchs);
  return s;
}

TEST(SpecFuzz, RenderRefusesClearlyOrTheSourceCompiles) {
  std::mt19937_64 rng(4242);
  std::vector<KernelSpec> rendered;
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    const KernelSpec s = random_spec(rng);
    try {
      render(s);
      rendered.push_back(s);
    } catch (const Error& e) {
      ++refused;
      ASSERT_TRUE(e.code() == ErrorCode::kUnsupported || e.code() == ErrorCode::kInvalidArgument)
          << to_string(e.code()) << ": " << e.what();
    } catch (const std::exception& e) {
      FAIL() << "not an attnjit::Error for spec " << s.to_json().dump() << ": " << e.what();
    }
  }
  ASSERT_FALSE(rendered.empty());
  EXPECT_GT(refused, 0);
  // Every spec that can be built reads back from its name and its JSON.
  for (const KernelSpec& s : rendered) {
    EXPECT_EQ(KernelSpec::from_name(s.name()), s) << s.name();
    EXPECT_EQ(KernelSpec::from_json(s.to_json()), s) << s.to_json().dump();
  }
  // Compile a sample of what rendered (NVRTC takes ~0.5 s per variant).
  const size_t kSample = 16;
  for (size_t i = 0; i < rendered.size() && i < kSample; ++i) {
    const KernelSpec& s = rendered[i * (rendered.size() / kSample + 1) % rendered.size()];
    try {
      compile::compile(s.name(), render(s), s.arch);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rendered but did not compile: " << s.to_json().dump() << "\n" << e.what();
    }
  }
}

}  // namespace
}  // namespace attnjit::render
