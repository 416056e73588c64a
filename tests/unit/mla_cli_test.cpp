// The CLI and the mla family: `prewarm --config deepseek-v3` builds the MLA variants
// (bf16 KV, and fp8 KV with a bf16 and an fp8 query), and `inspect` shows their backend,
// dtypes and tiling.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/cli_fixture.hpp"

namespace attnjit {
namespace {

using nlohmann::json;

using Result = testing::CliResult;
using MlaCliTest = testing::CliFixture;

TEST_F(MlaCliTest, DeepseekV3PrewarmBuildsTheMlaVariants) {
  Result r = run("prewarm --config deepseek-v3 --arch sm_90a --json");
  ASSERT_EQ(r.code, 0) << r.all();
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.all();
  // bf16 KV on the wgmma kernel (auto's pick on sm_90a at every shape); the fp8 e4m3 KV the
  // config lists, read with a bf16 and with an fp8 query (the wgmma kernel too: dense pages);
  // each for 128 heads (the wide tile) and, at tensor parallelism 8, 16 (the narrow one).
  EXPECT_EQ(j["total"], 6) << j.dump(2);
  EXPECT_EQ(j["compiled"], 6) << j.dump(2);
  for (const char* v : {"mla.bf16.hd576x512", "mla.bf16.kve4m3.hd576x512", "mla.e4m3.obf16.hd576x512"})
    for (const char* tile : {"", "narrow."}) {
      const std::string name = std::string(v) + ".g1.p64.nhd.causal." + tile + "trtllmgen.sm90a";
      EXPECT_NE(r.out.find(name), std::string::npos) << name << "\n" << j.dump(2);
    }
  EXPECT_EQ(j["failed"], 0) << j.dump(2);
  EXPECT_TRUE(j["skipped"].empty()) << j.dump(2);

  Result text = run("prewarm --config deepseek-v3 --arch sm_80,sm_120 --list");
  EXPECT_EQ(text.code, 0) << text.all();
  for (const char* arch : {"sm80", "sm120"})
    for (const char* v : {"mla.bf16.hd576x512", "mla.bf16.kve4m3.hd576x512", "mla.e4m3.obf16.hd576x512"}) {
      const std::string name = std::string(v) + ".g1.p64.nhd.causal." + arch;
      EXPECT_NE(text.out.find(name + "\n"), std::string::npos) << name << "\n" << text.all();
    }
}

TEST_F(MlaCliTest, InspectShowsBackendAndTiling) {
  Result r = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.sm90a");
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("xqa"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backend:    xqa"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("head rows x 32-token tiles of 576 dims"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2-stage cp.async ring"), std::string::npos) << r.out;
}

TEST_F(MlaCliTest, InspectShowsTheWgmmaKernel) {
  Result r = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.trtllmgen.sm90a");
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("backend:    trtllm-gen"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wgmma, two math warpgroups (seesaw): 64 head rows x "), std::string::npos) << r.out;
  Result f = run("inspect mla.e4m3.obf16.hd576x512.g1.p64.nhd.causal.trtllmgen.sm90a");
  ASSERT_EQ(f.code, 0) << f.all();
  EXPECT_NE(f.out.find("backend:    trtllm-gen"), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("fp8 KV landed in the tile buffers and widened to fp16 in shared memory"), std::string::npos) << f.out;
  // tile32: the same seesaw in 32-token tiles, four buffers.
  Result t = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.tile32.trtllmgen.sm90a");
  ASSERT_EQ(t.code, 0) << t.all();
  EXPECT_NE(t.out.find("64 head rows x 32-token tiles of 576 dims"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("; 4 buffers,"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("flat schedule"), std::string::npos) << t.out;
  // flat: the same tile, its schedule named.
  Result fl = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.flat.trtllmgen.sm90a");
  ASSERT_EQ(fl.code, 0) << fl.all();
  EXPECT_NE(fl.out.find("; flat schedule: a CTA per SM and row block"), std::string::npos) << fl.out;
}

TEST_F(MlaCliTest, InspectShowsTheNarrowTile) {
  Result r = run("inspect mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.narrow.trtllmgen.sm90a");
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("backend:    trtllm-gen"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wgmma, narrow tile: up to 16 head rows in N and 64-token tiles of 576 dims in M"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a ring of 50 slots of 4.0 KiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp8 KV widened to fp16 in registers: wgmma's A operands"), std::string::npos) << r.out;
  Result j = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.narrow.trtllmgen.sm90a --json");
  ASSERT_EQ(j.code, 0) << j.all();
  EXPECT_NE(j.out.find("\"rows_per_cta\": 16"), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"ring_slots\": 25"), std::string::npos) << j.out;
  // xqa has no narrow tile: inspect says why.
  Result bad = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.narrow.sm90a");
  EXPECT_NE(bad.code, 0) << bad.all();
  EXPECT_NE(bad.all().find("narrow, narrow32, tile32 and flat are tiles of the trtllm-gen mla kernel"), std::string::npos)
      << bad.all();
  Result n32 = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.narrow32.trtllmgen.sm90a");
  ASSERT_EQ(n32.code, 0) << n32.all();
  EXPECT_NE(n32.out.find("wgmma, narrow tile: up to 32 head rows in N"), std::string::npos) << n32.out;
  Result f32 = run("inspect mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.narrow32.trtllmgen.sm90a");
  EXPECT_NE(f32.code, 0) << f32.all();
  EXPECT_NE(f32.all().find("narrow32 takes 16-bit KV"), std::string::npos) << f32.all();
}

// tensor_parallel: each degree's heads a GPU; one that does not divide the heads names the field.
TEST_F(MlaCliTest, TensorParallelDegreesChooseTheTiles) {
  auto config = [&](const std::string& tp) {
    const std::string path = dir_ + "/m.json";
    std::ofstream(path, std::ios::trunc)
        << R"({"name": "m", "num_attention_heads": 64, "num_key_value_heads": 64, "head_dim": 192, "ops": [)"
        << R"({"op": "mla", "page_sizes": [32], "tensor_parallel": )" << tp << "}]}";
    return run("prewarm --config '" + path + "' --arch sm_90a --list");
  };
  Result r = config("[1, 4]");
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("mla.bf16.hd576x512.g1.p32.nhd.causal.trtllmgen.sm90a\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mla.bf16.hd576x512.g1.p32.nhd.causal.narrow.trtllmgen.sm90a\n"), std::string::npos) << r.out;
  r = config("[2]");  // 32 heads a GPU: the 32-row narrow tile (16-bit KV)
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("mla.bf16.hd576x512.g1.p32.nhd.causal.narrow32.trtllmgen.sm90a\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(".narrow."), std::string::npos) << r.out;
  r = config("[1]");  // 64 heads: the wide tile only
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(r.out.find("narrow"), std::string::npos) << r.out;
  r = config("[3]");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0].tensor_parallel: 3 does not divide num_attention_heads 64"), std::string::npos) << r.err;
  r = config("[\"8\"]");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0].tensor_parallel: expected tensor-parallel degrees"), std::string::npos) << r.err;
}

TEST_F(MlaCliTest, InspectShowsTheFp8Variants) {
  // fp8 KV: four 18 KB stages, the KV widened to fp16 in registers.
  for (const char* name : {"mla.bf16.kve4m3.hd576x512.g1.p64.nhd.causal.sm90a", "mla.e4m3.obf16.hd576x512.g1.p64.nhd.causal.sm120"}) {
    Result r = run(std::string("inspect ") + name);
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_NE(r.out.find("backend:    xqa"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("4-stage cp.async ring"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("fp8 KV widened to fp16 in registers"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("e4m3"), std::string::npos) << r.out;
  }
  Result r = run("inspect mla.e4m3.obf16.hd576x512.g1.p64.nhd.causal.sm90a --json");
  ASSERT_EQ(r.code, 0) << r.all();
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.all();
  EXPECT_NE(j.dump().find("\"kv_dtype\":\"fp8_e4m3\""), std::string::npos) << j.dump(2);
  EXPECT_NE(j.dump().find("\"out_dtype\":\"bf16\""), std::string::npos) << j.dump(2);
  EXPECT_NE(j.dump().find("\"stages\":4"), std::string::npos) << j.dump(2);
  // An fp8 query with a bf16 cache, or an fp8 output, has no kernel: inspect says why.
  Result bad = run("inspect mla.e4m3.kvbf16.obf16.hd576x512.g1.p64.nhd.causal.sm90a");
  EXPECT_NE(bad.code, 0) << bad.all();
  EXPECT_NE(bad.all().find("kv_cache dtype bf16"), std::string::npos) << bad.all();
}

}  // namespace
}  // namespace attnjit
