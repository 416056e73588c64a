// GPU tests for the Hopper-class driver paths: a cluster launch with PDL, and a TMA tile load
// through a host-encoded CUtensorMap in __grid_constant__ Params (skip without an sm_90+ GPU).
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "compile/nvrtc_compiler.hpp"
#include "compile/toolkit_headers.hpp"
#include "driver/cuda_driver.hpp"
#include "driver/tensor_map.hpp"
#include "gpu/hopper_kernels.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::driver {
namespace {

// Host mirrors of the Params in tests/gpu/hopper_kernels.hpp.
struct ClusterParams {
  unsigned* out;
  unsigned n;
  unsigned rep;
};
struct TmaParams {
  CUtensorMap map;  // alignas(128) in CUDA 13's cuda.h, as the device mirror
  float* out;
  int x0, y0;
};
static_assert(offsetof(TmaParams, out) == 128 && sizeof(TmaParams) == 256, "the device Params' layout");
constexpr int kBoxW = 32, kBoxH = 8;
constexpr int kRows = 64, kCols = 96;

class DriverHopperGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (!is_available(&reason)) GTEST_SKIP() << "no usable CUDA driver: " << reason;
    const DeviceInfo info = device_info(current_device());
    if (info.sm_major < 9) GTEST_SKIP() << "clusters, PDL and TMA need sm_90+, device is sm_" << info.sm_major << info.sm_minor;
    const spec::Arch arch = spec::arch_for_device(info.sm_major, info.sm_minor);
    render::RenderedUnit u;
    u.source = attnjit::testing::kHopperKernels;
    compile::add_cccl(u);
    cubin_ = compile::compile("hopper.driver.kernels", u, arch).cubin;
    module_ = Module(current_device(), cubin_.data());
  }
  std::string cubin_;
  Module module_;
};

// 64 blocks in clusters of 2, both kernels launched with PDL: the probe records each block's
// cluster rank and size and reads its partner's shared memory (DSMEM); the check kernel waits on
// griddepcontrol and verifies it on the device; the host verifies both.
TEST_F(DriverHopperGpuTest, ClusterOfTwoWithPdl) {
  constexpr unsigned n = 64, reps = 5;
  DeviceBuffer out((n * 3 + reps * n) * sizeof(unsigned));
  memset_d32(out.get(), 0xdeadbeefu, n * 3 + reps * n);
  ClusterParams p{static_cast<unsigned*>(out.ptr()), n, 0};
  void* args[] = {&p};
  for (unsigned rep = 0; rep < reps; ++rep) {
    p.rep = rep;  // the params are copied at launch
    LaunchConfig probe;
    probe.grid[0] = n;
    probe.block[0] = 32;
    probe.cluster[0] = 2;
    probe.pdl = true;
    launch(module_.function("cluster_probe"), probe, args);
    LaunchConfig check = probe;
    check.grid[0] = n / 32;  // 2 blocks: one cluster
    launch(module_.function("cluster_check"), check, args);
  }
  stream_sync(nullptr);
  std::vector<unsigned> h(n * 3 + reps * n);
  memcpy_dtoh(h.data(), out.get(), h.size() * sizeof(unsigned));
  for (unsigned b = 0; b < n; ++b) {
    EXPECT_EQ(h[b * 3 + 0], b % 2) << "cluster rank of block " << b;
    EXPECT_EQ(h[b * 3 + 1], 2u) << "cluster size seen by block " << b;
    EXPECT_EQ(h[b * 3 + 2], 1000u + (b ^ 1u) + 100000u * (reps - 1)) << "partner's shared memory read by block " << b;
    for (unsigned rep = 0; rep < reps; ++rep)
      EXPECT_EQ(h[n * 3 + rep * n + b], 1u) << "rep " << rep << ": the PDL dependent saw block " << b
                                            << "'s results wrong or before they were written";
  }
}

// Loads an 8 x 32 float tile with cp.async.bulk.tensor into shared memory behind an mbarrier
// (cuda::barrier + cuda::ptx), with and without the 128B swizzle, in bounds and at the edge
// (where TMA fills zeros).
TEST_F(DriverHopperGpuTest, TmaLoadsATileThroughAGridConstantTensorMap) {
  std::vector<float> host(kRows * kCols);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) host[r * kCols + c] = static_cast<float>(r * 1000 + c);
  DeviceBuffer src(host.size() * sizeof(float)), out(kBoxW * kBoxH * sizeof(float));
  memcpy_htod(src.get(), host.data(), host.size() * sizeof(float));
  struct Case {
    CUtensorMapSwizzle swizzle;
    int x0, y0;
  };
  for (const Case& c : {Case{CU_TENSOR_MAP_SWIZZLE_NONE, 32, 16}, Case{CU_TENSOR_MAP_SWIZZLE_128B, 32, 16},
                        Case{CU_TENSOR_MAP_SWIZZLE_NONE, 80, 60}, Case{CU_TENSOR_MAP_SWIZZLE_128B, 80, 60}}) {
    SCOPED_TRACE("swizzle " + std::to_string(c.swizzle) + " at x " + std::to_string(c.x0) + ", y " +
                 std::to_string(c.y0));
    TmaParams p{};
    p.map = encode_tensor_map_tiled(tiled_2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, src.ptr(), kRows, kCols,
                                             kCols * sizeof(float), kBoxH, kBoxW, c.swizzle));
    p.out = static_cast<float*>(out.ptr());
    p.x0 = c.x0;
    p.y0 = c.y0;
    memset_d32(out.get(), 0x7fc00000u, kBoxW * kBoxH);  // NaN: a slot TMA did not write shows
    void* args[] = {&p};
    LaunchConfig cfg;
    cfg.block[0] = 128;
    launch(module_.function("tma_tile"), cfg, args);
    stream_sync(nullptr);
    std::vector<float> got(kBoxW * kBoxH);
    memcpy_dtoh(got.data(), out.get(), got.size() * sizeof(float));
    int wrong = 0;
    for (int r = 0; r < kBoxH; ++r)
      for (int col = 0; col < kBoxW; ++col) {
        const int gr = c.y0 + r, gc = c.x0 + col;
        const float want = gr < kRows && gc < kCols ? host[gr * kCols + gc] : 0.f;
        // 128B swizzle: 16-byte chunk j of row r lands in chunk j ^ (r % 8) of that 128-byte row.
        const int chunk = col / 4, slot = c.swizzle == CU_TENSOR_MAP_SWIZZLE_128B ? (chunk ^ (r % 8)) : chunk;
        const float have = got[r * kBoxW + slot * 4 + col % 4];
        if (have != want && ++wrong <= 8) ADD_FAILURE() << "row " << r << " col " << col << ": " << have << " != " << want;
      }
    EXPECT_EQ(wrong, 0);
  }
}

// encode_tensor_map_tiled keeps each thread's last four maps: the same descriptor again gives
// the same bytes, each field's change gives another map, and a descriptor evicted by four
// others encodes afresh to the bytes it had (the map is a pure function of the descriptor).
TEST(DriverTensorMapGpu, RepeatedDescriptorsReuseTheirMapAndEveryFieldCounts) {
  std::string reason;
  if (!is_available(&reason)) GTEST_SKIP() << "no usable CUDA driver: " << reason;
  DeviceBuffer src(size_t(kRows) * kCols * sizeof(float) + 256);
  const TiledTensorMapDesc base = tiled_2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, src.ptr(), kRows, kCols,
                                           kCols * sizeof(float), kBoxH, kBoxW);
  auto bytes = [](const CUtensorMap& m) { return std::string(reinterpret_cast<const char*>(&m), sizeof(m)); };
  const std::string first = bytes(encode_tensor_map_tiled(base));
  EXPECT_EQ(bytes(encode_tensor_map_tiled(base)), first);
  std::vector<TiledTensorMapDesc> others(5, base);
  others[0].global = static_cast<const char*>(src.ptr()) + 256;
  others[1].box[1] = kBoxH / 2;
  others[2].swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  others[3].dims[1] = kRows / 2;
  others[4].l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  for (size_t i = 0; i < others.size(); ++i) {
    const std::string m = bytes(encode_tensor_map_tiled(others[i]));
    EXPECT_NE(m, first) << "descriptor " << i;
    EXPECT_EQ(bytes(encode_tensor_map_tiled(others[i])), m) << "descriptor " << i;
  }
  EXPECT_EQ(bytes(encode_tensor_map_tiled(base)), first);  // evicted, encoded again
}

}  // namespace
}  // namespace attnjit::driver
