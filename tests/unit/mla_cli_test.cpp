// The CLI and the mla family: `prewarm --config deepseek-v3` builds the MLA variants
// (the fp8 KV one is skipped with a note), and `inspect` shows their backend and tiling.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/shell_run.hpp"

namespace attnjit {
namespace {

using nlohmann::json;

struct Result {
  int code = -1;
  std::string out, err;
  std::string all() const { return out + err; }
};

class MlaCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(ATTNJIT_CLI_PATH).empty()) GTEST_SKIP() << "the attnjit-cli target is not built";
    char tmpl[] = "/tmp/attnjit-mla-cli-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  Result run(const std::string& args) const {
    return testing::shell_run<Result>("ATTNJIT_CACHE_DIR='" + dir_ + "/cache' ATTNJIT_LOG_LEVEL=warn '" +
                                          std::string(ATTNJIT_CLI_PATH) + "' " + args,
                                      dir_ + "/stderr.txt");
  }
  std::string dir_;
};

TEST_F(MlaCliTest, DeepseekV3PrewarmBuildsTheMlaVariants) {
  Result r = run("prewarm --config deepseek-v3 --arch sm_90a --json");
  ASSERT_EQ(r.code, 0) << r.all();
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.all();
  EXPECT_EQ(j["total"], 1) << j.dump(2);
  EXPECT_EQ(j["compiled"], 1) << j.dump(2);
  EXPECT_EQ(j["failed"], 0) << j.dump(2);
  // The fp8 KV cache the config lists has no kernel yet: a note, not an error.
  ASSERT_EQ(j["skipped"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["skipped"][0]["op"], "mla");
  EXPECT_NE(j["skipped"][0]["reason"].get<std::string>().find("fp8"), std::string::npos) << j.dump(2);

  Result text = run("prewarm --config deepseek-v3 --arch sm_80,sm_120 --list");
  EXPECT_EQ(text.code, 0) << text.all();
  EXPECT_NE(text.out.find("mla.bf16.hd576x512.g1.p64.nhd.causal.sm80"), std::string::npos) << text.all();
  EXPECT_NE(text.out.find("mla.bf16.hd576x512.g1.p64.nhd.causal.sm120"), std::string::npos) << text.all();
}

TEST_F(MlaCliTest, InspectShowsBackendAndTiling) {
  Result r = run("inspect mla.bf16.hd576x512.g1.p64.nhd.causal.sm90a");
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("xqa"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backend:    xqa"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("head rows x 32-token tiles of 576 dims"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace attnjit
