// Tests of the wgmma prefill kernel's launch side: its TMA maps (src/ops/fia/prefill_tma.cpp:
// the dimension order each layout gets, the tensors TMA cannot take) and its grid
// (prefill_schedule in prefill_family.cpp). Pure: no driver.
#include <gtest/gtest.h>

#include <cstdint>

#include "attnjit/error.hpp"
#include "common/env_guard.hpp"
#include "common/op_args.hpp"
#include "driver/tensor_map.hpp"
#include "ops/fia/prefill_family.hpp"
#include "ops/fia/prefill_tma.hpp"

namespace attnjit::ops {
namespace {

const void* const kBase = reinterpret_cast<const void*>(uintptr_t{0x7f0000000000});
constexpr int kTile = 128;

TEST(PrefillTma, BsndGoesHeadTokenBatch) {
  // (B 3, S 1000, N 8, D 128), packed.
  const auto m = plan_kv_map(kBase, DType::kBFloat16, 128, 8, 1000, 3, 1000LL * 8 * 128, 8 * 128, 128, kTile);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->dim_of[0], 1);  // head
  EXPECT_EQ(m->dim_of[1], 2);  // token
  EXPECT_EQ(m->dim_of[2], 3);  // batch
  EXPECT_EQ(m->desc.dims[0], 128u);
  EXPECT_EQ(m->desc.dims[2], 1000u);
  EXPECT_EQ(m->desc.box[0], 64u);
  EXPECT_EQ(m->desc.box[1], 1u);
  EXPECT_EQ(m->desc.box[2], uint32_t(kTile));
  EXPECT_EQ(m->desc.box[3], 1u);
  EXPECT_EQ(m->desc.strides[1], 8u * 128 * 2);
  EXPECT_EQ(m->desc.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  EXPECT_NO_THROW(driver::check_tensor_map(m->desc));
}

TEST(PrefillTma, BnsdGoesTokenHeadBatch) {
  // (B 2, N 4, S 512, D 64).
  const auto m = plan_kv_map(kBase, DType::kFloat16, 64, 4, 512, 2, 4LL * 512 * 64, 64, 512 * 64, 64);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->dim_of[1], 1);
  EXPECT_EQ(m->dim_of[0], 2);
  EXPECT_EQ(m->dim_of[2], 3);
  EXPECT_EQ(m->desc.box[1], 64u);
  EXPECT_EQ(m->desc.dims[1], 512u);
  EXPECT_EQ(m->desc.dtype, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
  EXPECT_NO_THROW(driver::check_tensor_map(m->desc));
}

TEST(PrefillTma, TndHasOneBatchWhoseStrideIsNeverStepped) {
  // (T 777, N 16, D 192): the batch stride is 0 and its extent 1.
  const auto m = plan_kv_map(kBase, DType::kBFloat16, 192, 16, 777, 1, 0, 16 * 192, 192, kTile);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->desc.dims[size_t(m->dim_of[2])], 1u);
  EXPECT_EQ(m->desc.dims[size_t(m->dim_of[1])], 777u);
  EXPECT_NO_THROW(driver::check_tensor_map(m->desc));
}

TEST(PrefillTma, RefusesWhatTmaCannotTake) {
  // A head stride of 100 elements: 200 bytes, not a multiple of 16.
  EXPECT_FALSE(plan_kv_map(kBase, DType::kBFloat16, 64, 4, 100, 2, 100LL * 400, 400, 100, kTile).has_value());
  // A base off 16 bytes.
  const void* odd = reinterpret_cast<const void*>(uintptr_t{0x7f0000000008});
  EXPECT_FALSE(plan_kv_map(odd, DType::kBFloat16, 128, 8, 100, 2, 100LL * 1024, 1024, 128, kTile).has_value());
  // Tokens overlapping across heads: the token stride spans less than the heads below it.
  EXPECT_FALSE(plan_kv_map(kBase, DType::kBFloat16, 128, 8, 100, 2, 100LL * 1024, 512, 128, kTile).has_value());
  // Head dims that are not whole 64-element boxes, and 8-bit data.
  EXPECT_FALSE(plan_kv_map(kBase, DType::kBFloat16, 96, 8, 100, 2, 100LL * 768, 768, 96, kTile).has_value());
  EXPECT_FALSE(plan_kv_map(kBase, DType::kFloat8E4M3, 128, 8, 100, 2, 100LL * 1024, 1024, 128, kTile).has_value());
}

// Paged K/V, (blocknum 40, block_size 256, KV_N 8 * D 128): the map's batch is the block and
// its tokens a block's slots; a KV tile's box stays inside one block (the host maps only
// block sizes whole tiles divide). The (blocknum, KV_N, block_size, D) form puts the slots
// below the heads.
TEST(PrefillTma, PagedKvMapsBlocksAsItsBatch) {
  const auto m = plan_kv_map(kBase, DType::kBFloat16, 128, 8, 256, 40, 256LL * 8 * 128, 8 * 128, 128, kTile);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->dim_of[0], 1);  // head
  EXPECT_EQ(m->dim_of[1], 2);  // slot
  EXPECT_EQ(m->dim_of[2], 3);  // block
  EXPECT_EQ(m->desc.dims[2], 256u);
  EXPECT_EQ(m->desc.dims[3], 40u);
  EXPECT_EQ(m->desc.box[2], uint32_t(kTile));
  const auto n = plan_kv_map(kBase, DType::kBFloat16, 128, 8, 256, 40, 8LL * 256 * 128, 128, 256 * 128, kTile);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->dim_of[1], 1);  // slot
  EXPECT_EQ(n->dim_of[0], 2);  // head
  EXPECT_EQ(n->dim_of[2], 3);  // block
}

// The launch-side switch: which plans get maps (no driver is reached on these paths).
TEST(PrefillTma, OnlyTheWgmmaKernelOnContiguousKvTakesMaps) {
  testing::EnvGuard on("ATTNJIT_PREFILL_TMA", nullptr);
  FiaArgs a = testing::valid_fia();
  a.backend = Backend::kXqa;
  FiaPlan plan = plan_fia(a, spec::Arch::parse("sm_90a"));
  plan.params.kv_tma = 7;
  prefill_set_kv_maps(plan, a, plan.params);
  EXPECT_EQ(plan.params.kv_tma, 0);  // the portable kernel has no TMA path

  a.backend = Backend::kTrtllmGen;
  plan = plan_fia(a, spec::Arch::parse("sm_90a"));
  testing::EnvGuard off("ATTNJIT_PREFILL_TMA", "0");
  plan.params.kv_tma = 7;
  prefill_set_kv_maps(plan, a, plan.params);
  EXPECT_EQ(plan.params.kv_tma, 0);  // switched off: cp.async gathers

  testing::EnvGuard bad("ATTNJIT_PREFILL_TMA", "yes");
  try {
    prefill_set_kv_maps(plan, a, plan.params);
    FAIL() << "an invalid switch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ATTNJIT_PREFILL_TMA"), std::string::npos) << e.what();
  }
}

TEST(PrefillSchedule, OneWaveStaticWithoutABandDynamicUnderOne) {
  testing::EnvGuard persistent("ATTNJIT_PREFILL_PERSISTENT", nullptr);
  testing::EnvGuard cap("ATTNJIT_PREFILL_CTAS", nullptr);
  FiaArgs a = testing::valid_fia(1024);
  a.backend = Backend::kTrtllmGen;
  const spec::Arch arch = spec::Arch::parse("sm_90a");
  PrefillSchedule none = prefill_schedule(plan_fia(a, arch), 1000, 132);
  EXPECT_EQ(none.grid.x, 132u);  // no mask: a static wave
  EXPECT_FALSE(none.dynamic);
  EXPECT_EQ(prefill_persistent_mode(plan_fia(a, arch).spec), 1);  // what inspect shows
  a.sparse_mode = 3;
  a.atten_mask = TensorView::contiguous(testing::fake(0x900000), DType::kUInt8, {2048, 2048});
  const spec::Arch sm90a = spec::Arch::parse("sm_90a");
  FiaPlan plan = plan_fia(a, sm90a);
  const int tiles = 1000, items = tiles * testing::kFiaKvHeads;
  PrefillSchedule s = prefill_schedule(plan, tiles, 132);
  EXPECT_EQ(s.grid.x, 132u);  // one wave, dynamic
  EXPECT_EQ(s.grid.y * s.grid.z, 1u);
  EXPECT_TRUE(s.dynamic);
  EXPECT_EQ(prefill_persistent_mode(plan.spec), 2);
  s = prefill_schedule(plan, 10, 132);  // fewer items than SMs: one each, no counter
  EXPECT_EQ(s.grid.x, 20u);
  EXPECT_FALSE(s.dynamic);
  {
    testing::EnvGuard three("ATTNJIT_PREFILL_CTAS", "3");
    s = prefill_schedule(plan, 10, 132);
    EXPECT_EQ(s.grid.x, 3u);
    EXPECT_TRUE(s.dynamic);
  }
  {
    testing::EnvGuard stat("ATTNJIT_PREFILL_PERSISTENT", "1");
    s = prefill_schedule(plan, tiles, 132);
    EXPECT_EQ(s.grid.x, 131u);  // a static wave under a band: an odd count
    EXPECT_FALSE(s.dynamic);
  }
  {
    testing::EnvGuard off("ATTNJIT_PREFILL_PERSISTENT", "0");
    s = prefill_schedule(plan, tiles, 132);
    EXPECT_EQ(s.grid.x, unsigned(items));  // a CTA per item
    EXPECT_FALSE(s.dynamic);
    EXPECT_EQ(prefill_persistent_mode(plan.spec), 0);
  }
  testing::EnvGuard bad("ATTNJIT_PREFILL_PERSISTENT", "3");
  EXPECT_THROW(prefill_schedule(plan, tiles, 132), Error);

  a.backend = Backend::kXqa;  // the portable kernel: tiles x KV heads x value chunks
  plan = plan_fia(a, sm90a);
  testing::EnvGuard unset("ATTNJIT_PREFILL_PERSISTENT", nullptr);
  s = prefill_schedule(plan, tiles, 132);
  EXPECT_EQ(s.grid.x, unsigned(tiles));
  EXPECT_EQ(s.grid.y, unsigned(testing::kFiaKvHeads));
  EXPECT_FALSE(s.dynamic);
}

}  // namespace
}  // namespace attnjit::ops
