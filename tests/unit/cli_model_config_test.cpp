// Tests of the model configs `attnjit prewarm --config` reads: a bad field is named,
// and each op expands to the kernels it runs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "common/cli_fixture.hpp"

namespace attnjit::cli_test {
namespace {

using nlohmann::json;
using ::attnjit::testing::CliResult;

// Writes a config and returns `prewarm --list` on it.
class ModelConfigCliTest : public ::attnjit::testing::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    config_ = dir_ + "/model.json";
  }
  CliResult list(const std::string& config_json) {
    std::ofstream(config_, std::ios::trunc) << config_json;
    return run("prewarm --config '" + config_ + "' --arch sm_90a --list");
  }
  static std::string config(const std::string& top, const std::string& op) {
    return R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64)" + top +
           R"(, "ops": [{"op": "xqa")" + op + "}]}";
  }
  void expect_error(const std::string& top, const std::string& op, const std::vector<std::string>& needles) {
    CliResult r = list(config(top, op));
    EXPECT_EQ(r.code, 1) << top << op << "\n" << r.all();
    for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' not in: " << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("attnjit:", 1), std::string::npos) << "doubled prefix: " << r.err;
  }

  std::string config_;
};

// get<int>() kept the low 32 bits: 4294967328 heads became 32.
TEST_F(ModelConfigCliTest, LargeIntegersNameTheField) {
  CliResult r = list(R"({"name": "x", "num_attention_heads": 4294967328, "num_key_value_heads": 8, "head_dim": 64,
                         "ops": [{"op": "decode"}]})");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("model config: num_attention_heads: expected a positive integer"), std::string::npos) << r.err;
  r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 4294967424,
              "ops": [{"op": "decode"}]})");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("model config: head_dim: expected a positive integer"), std::string::npos) << r.err;
  expect_error("", R"(, "page_sizes": [4294967328])", {"ops[0].page_sizes", "4294967328"});
  expect_error(R"(, "sliding_window": 18446744073709551615)", "", {"sliding_window"});
  r = run(R"(inspect '{"head_dim": 4294967424}' --arch sm_90a)");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("'head_dim': 4294967424 is out of range"), std::string::npos) << r.err;
}

TEST_F(ModelConfigCliTest, WrongTypesAndUnknownValuesNameTheField) {
  expect_error(R"(, "dtype": 16)", "", {"model config: dtype: expected a string, got number"});
  expect_error(R"(, "dtype": null)", "", {"model config: dtype: expected a string, got null"});
  expect_error(R"(, "dtype": "bogus")", "", {"model config: dtype: unknown dtype 'bogus'"});
  expect_error("", R"(, "backend": 1)", {"model config: ops[0].backend: expected a string, got number"});
  expect_error("", R"(, "backend": "bogus")", {"model config: ops[0].backend: expected \"auto\"", "bogus"});
  expect_error("", R"(, "kv_cache_dtypes": ["fp7"])", {"model config: ops[0].kv_cache_dtypes: unknown dtype 'fp7'"});
  // Integer lists say what they hold.
  CliResult r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
                         "ops": [{"op": "fia", "sparse_modes": ["x"]}]})");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0].sparse_modes: expected sparse modes (0-4), got \"x\""), std::string::npos) << r.err;
  r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "ops": [{"op": "fia", "block_sizes": [1.5]}]})");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0].block_sizes: expected block sizes in tokens, got 1.5"), std::string::npos) << r.err;
  // Unknown op: every planned family is listed.
  r = list(R"({"name": "x", "ops": [{"op": "bogus"}]})");
  EXPECT_EQ(r.code, 1) << r.all();
  for (const char* op :
       {"'bogus'", "decode", "xqa", "mla", "batch_decode_mla", "fused_infer_attention_score", "prefill"})
    EXPECT_NE(r.err.find(op), std::string::npos) << op << " not in: " << r.err;
}

// fused_infer_attention_score in a model config: its specs come from the op's planning.
// On sm_90a auto takes the wgmma (trtllm-gen) prefill kernel for head dim 64.
TEST_F(ModelConfigCliTest, FiaOpExpandsToPrefillSpecs) {
  CliResult r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
                         "ops": [{"op": "fia", "sparse_modes": [0, 3], "return_lse": true}]})");
  EXPECT_EQ(r.code, 0) << r.all();
  for (const char* name : {"prefill.bf16.hd64.g1.contig.nhd.lse.trtllmgen.sm90a",
                           "prefill.bf16.hd64.g1.contig.nhd.causal.lse.trtllmgen.sm90a"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " not in: " << r.out;
  // Causal first: the Q_S = 1 call ignores sparse_mode, so it must not pass the
  // compressed 2048x2048 mask that decode refuses.
  r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "ops": [{"op": "fia", "sparse_modes": [3]}]})");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("prefill.bf16.hd64.g1.contig.nhd.causal.trtllmgen.sm90a"), std::string::npos) << r.out;
  // Q_S = 1 without mask, pse or LSE: the decode family's kernel (contiguous K/V).
  EXPECT_NE(r.out.find("decode.bf16.hd64.g4.contig.nhd.sm90a"), std::string::npos) << "the Q_S = 1 kernel: " << r.out;
  EXPECT_EQ(r.out.find("prefill.bf16.hd64.g1.contig.nhd.trtllmgen.sm90a"), std::string::npos) << r.out;
  r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "ops": [{"op": "fia", "block_sizes": [64], "decode": false}]})");
  EXPECT_EQ(r.code, 1) << r.all();  // Q_S > 1 pages are multiples of 128: the op's refusal, named
  EXPECT_NE(r.err.find("ops[0]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("block_size"), std::string::npos) << r.err;
}

// "query_rope": true asks for MLA inside FIA: the mla family's splitrope kernel per block size.
TEST_F(ModelConfigCliTest, FiaOpWithQueryRopeExpandsToTheMlaKernel) {
  CliResult r = list(R"({"name": "x", "num_attention_heads": 128, "num_key_value_heads": 128, "head_dim": 192,
                         "ops": [{"op": "fia", "query_rope": true, "block_sizes": [16, 128], "return_lse": true}]})");
  EXPECT_EQ(r.code, 0) << r.all();
  for (const char* name : {"mla.bf16.hd576x512.g1.p16.nhd.causal.lse.splitrope.sm90a",
                           "mla.bf16.hd576x512.g1.p128.nhd.causal.lse.splitrope.sm90a"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " not in: " << r.out;
  EXPECT_EQ(r.out.find("prefill."), std::string::npos) << r.out;
  // The seed's MLA heads are 32, 64 or 128: the op's refusal, named against the op.
  r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64,
              "ops": [{"op": "fia", "query_rope": true}]})");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("num_heads"), std::string::npos) << r.err;
}

TEST_F(ModelConfigCliTest, Fp8OutputNeedsAnFp8KvCache) {
  expect_error("", R"(, "fp8_output": true)", {"ops[0].fp8_output", "fp8_e4m3"});
  CliResult r = list(config("", R"(, "fp8_output": true, "kv_cache_dtypes": ["bf16", "fp8_e4m3"])"));
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("xqa.bf16.kve4m3.oe4m3.hd64.g4.p32.nhd.sm90a"), std::string::npos) << r.out;
  // A backend that cannot serve an op's kernel is reported against that op's field.
  r = list(R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "ops": [{"op": "decode", "backend": "trtllm-gen"}]})");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0].backend"), std::string::npos) << r.err;
  // --list --json names each kernel as inspect and cache ls do.
  r = list(config("", ""));
  std::ofstream(config_, std::ios::trunc) << config("", "");
  const json j = run_json("prewarm --config '" + config_ + "' --arch sm_90a --list --json");
  ASSERT_FALSE(j["specs"].empty()) << j.dump(2);
  EXPECT_EQ(j["specs"][0]["name"], "xqa.bf16.hd64.g4.p32.nhd.sm90a") << j.dump(2);
}

// An xqa op expands to the batched kernel and, where batch 1 has its own (ops::decode_batch1_tile32:
// 16-bit pages at head_dim 128), that one too, so that no batch or length compiles at run time.
TEST_F(ModelConfigCliTest, XqaPrewarmsBatch1sKernelToo) {
  CliResult r = list(R"({"name": "x", "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
                         "ops": [{"op": "xqa", "page_sizes": [16, 32], "kv_cache_dtypes": ["bf16", "fp8_e4m3"]}]})");
  EXPECT_EQ(r.code, 0) << r.all();
  for (const char* name : {"xqa.bf16.hd128.g8.p32.nhd.sm90a", "xqa.bf16.hd128.g8.p32.nhd.tile32.sm90a",
                           "xqa.bf16.hd128.g8.p16.nhd.sm90a", "xqa.bf16.kve4m3.hd128.g8.p32.nhd.sm90a"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " not in:\n" << r.out;
  // Pages of 16 and fp8 K/V have one kernel for every batch.
  EXPECT_EQ(r.out.find("p16.nhd.tile32"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("kve4m3.hd128.g8.p32.nhd.tile32"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace attnjit::cli_test
