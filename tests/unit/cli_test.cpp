// Tests of tools/ (the attnjit CLI), run as a child process against a fresh
// cache folder per test: doctor, prewarm, inspect, cache, and the error paths.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "common/cli_fixture.hpp"
#include "attnjit/decode.hpp"
#include "attnjit/runtime.hpp"
#include "attnjit/xqa.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::cli_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Three variants of one small model: two xqa page sizes and one decode.
constexpr const char* kSmallConfig = R"({
  "name": "cli-test-model",
  "num_attention_heads": 8,
  "num_key_value_heads": 2,
  "head_dim": 64,
  "dtype": "bf16",
  "ops": [
    {"op": "decode"},
    {"op": "xqa", "page_sizes": [16, 32]},
    {"op": "prefill"}
  ]
})";

using ::attnjit::testing::CliResult;

// The fixture with kSmallConfig written to <dir>/model.json.
class CliTest : public ::attnjit::testing::CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    config_ = dir_ + "/model.json";
    std::ofstream(config_) << kSmallConfig;
  }

  std::set<std::string> stored_names() const {
    std::set<std::string> names;
    json j = run_json("cache ls --json");
    if (j.contains("entries"))
      for (const auto& e : j["entries"]) names.insert(e["name"].get<std::string>());
    return names;
  }

  std::string config_;
};

TEST_F(CliTest, DoctorJsonHasTheKeys) {
  json j = run_json("doctor --json");
  for (const char* key : {"library_version", "nvrtc_version", "template_hash", "gpu", "cache", "default_arch"})
    EXPECT_TRUE(j.contains(key)) << key << " missing in " << j.dump(2);
  EXPECT_TRUE(j["gpu"].contains("available"));
  EXPECT_TRUE(j["gpu"].contains("devices"));
  if (!j["gpu"]["available"].get<bool>()) EXPECT_FALSE(j["gpu"]["reason"].get<std::string>().empty());
  EXPECT_EQ(j["cache"]["dir"], cache_);
  EXPECT_EQ(j["cache"]["health"], "ok");
  EXPECT_EQ(j["cache"]["entries"], 0);
  EXPECT_FALSE(j["nvrtc_version"].get<std::string>().empty());
}

// Backend resolution is visible: on sm_100a the decode-family tables (the MLA seed)
// prefer trtllm-gen, no trtllm-gen kernel has run on a GPU, so auto takes xqa, and
// says so. (The prefill family's table prefers its portable kernel there; the prefill
// and mla families' wgmma kernels serve on sm_90a.)
TEST_F(CliTest, DoctorAndInspectSayWhichBackendAutoPicksAndWhy) {
  json j = run_json("doctor --json");
  bool saw_sm100 = false;
  for (const auto& b : j["backends"]) {
    const bool hopper = (b["family"] == "prefill" || b["family"] == "mla") && b["arch"] == "sm_90a";
    EXPECT_EQ(b["auto"], hopper ? "trtllm-gen" : "xqa") << b.dump();
    if (b["arch"] == "sm_100a" && b["family"] != "prefill") {
      saw_sm100 = true;
      const std::string why = b["why"].get<std::string>();
      EXPECT_NE(why.find("prefers trtllm-gen"), std::string::npos) << why;
      EXPECT_NE(why.find("has run correctly on a GPU"), std::string::npos) << why;
    }
  }
  EXPECT_TRUE(saw_sm100) << j.dump(2);
  EXPECT_NE(run("doctor").out.find("auto picks xqa"), std::string::npos);

  json i = run_json("inspect xqa.bf16.hd64.g4.p16.nhd.sm100a --json");
  EXPECT_EQ(i["backend"], "xqa");
  EXPECT_EQ(i["backend_auto"]["backend"], "xqa");
  EXPECT_NE(i["backend_auto"]["why"].get<std::string>().find("prefers trtllm-gen"), std::string::npos) << i.dump(2);
  EXPECT_EQ(i["launch"]["threads"], 128) << i.dump(2);
  CliResult r = run("inspect xqa.bf16.hd64.g4.p16.nhd.trtllmgen.sm100a");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("trtllm-gen"), std::string::npos) << r.err;
}

TEST_F(CliTest, DoctorWithoutJsonSaysWhatItFound) {
  CliResult r = run("doctor");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("nvrtc:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("health:     ok"), std::string::npos) << r.out;
}

TEST_F(CliTest, PrewarmTwiceCompilesOnceThenFindsEverything) {
  json first = run_json("prewarm --config '" + config_ + "' --arch sm_90a -j 2 --json");
  EXPECT_EQ(first["total"], 3) << first.dump(2);
  EXPECT_EQ(first["compiled"], 3);
  EXPECT_EQ(first["failed"], 0);
  ASSERT_EQ(first["skipped"].size(), 1u);
  EXPECT_EQ(first["skipped"][0]["op"], "prefill");

  CliResult second = run("prewarm --config '" + config_ + "' --arch sm_90a -j 2");
  EXPECT_EQ(second.code, 0) << second.all();
  EXPECT_NE(second.out.find("0 compiled, 3 already present, 0 failed"), std::string::npos) << second.all();
  EXPECT_NE(second.out.find("skipping op 'prefill': family not implemented yet"), std::string::npos) << second.all();
  EXPECT_EQ(stored_names().size(), 3u);
}

TEST_F(CliTest, InspectSourcePrintsTheEntry) {
  json pre = run_json("prewarm --spec decode.bf16.hd64.g4.contig.nhd.sm90a --json -q");
  EXPECT_EQ(pre["compiled"], 1) << pre.dump(2);

  CliResult r = run("inspect decode.bf16.hd64.g4.contig.nhd.sm90a --source");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("extern \"C\" __global__"), std::string::npos) << r.out;

  json j = run_json("inspect decode.bf16.hd64.g4.contig.nhd.sm90a --json --resources");
  EXPECT_EQ(j["name"], "decode.bf16.hd64.g4.contig.nhd.sm90a");
  EXPECT_EQ(j["origin"], "store");  // compiled by the prewarm above
  EXPECT_EQ(j["arch"], "sm_90a");
  EXPECT_GT(j["resources"]["registers"].get<int>(), 0);
  EXPECT_NE(j["ptxas"].get<std::string>().find("ptxas"), std::string::npos);
  // The layout a kernel engineer reads the SASS against.
  EXPECT_EQ(j["tiling"]["tile_tokens"], 16) << j.dump(2);
  EXPECT_GE(j["tiling"]["stages"].get<int>(), 2);
  EXPECT_GE(j["tiling"]["ctas_per_sm_by_smem"].get<int>(), 1);
  EXPECT_GT(j["tiling"]["smem_bytes"].get<int>(), 0);
  r = run("inspect decode.bf16.hd64.g4.contig.nhd.sm90a");
  EXPECT_NE(r.out.find("tiling:     4 warps x 16-token tiles"), std::string::npos) << r.out;
}

// The wgmma prefill kernel: how its K/V land and how its CTAs take work items.
TEST_F(CliTest, InspectShowsThePrefillLoadsAndSchedule) {
  CliResult r = run("inspect prefill.bf16.hd128.g1.contig.nhd.causal.trtllmgen.sm90a");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("K/V by TMA where the strides allow"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one wave taking work items from a counter"), std::string::npos) << r.out;  // causal: dynamic
  r = run("inspect prefill.bf16.hd128.g1.p128.nhd.causal.trtllmgen.sm90a");  // paged, whole tiles in a block
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("K/V by TMA where the strides allow"), std::string::npos) << r.out;
  r = run("inspect prefill.bf16.hd128.g1.contig.nhd.prefix.trtllmgen.sm90a");  // [prefix | own KV]: gathered
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("K/V by cp.async)"), std::string::npos) << r.out;
}

TEST_F(CliTest, InspectTakesASpecJson) {
  json j = run_json(R"(inspect '{"family": "xqa", "head_dim": 64, "group_size": 4, "page_size": 16}' --arch sm_80 --json)");
  EXPECT_EQ(j["name"], "xqa.bf16.hd64.g4.p16.nhd.sm80");
  EXPECT_EQ(j["origin"], "compiled");
  EXPECT_LE(j["tiling"]["smem_bytes"].get<int>(), 163 * 1024) << "sm_80 allows 163 KB per block";
  // Head dims given apart (MLA's 576/512): parsed, then refused by the family's can_implement.
  CliResult r = run(R"(inspect '{"family": "xqa", "head_dim_qk": 576, "head_dim_vo": 512, "page_size": 32}' --arch sm_90a)");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("xqa.bf16.hd576x512.g1.p32.nhd.sm90a"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("head_dim_qk == head_dim_vo"), std::string::npos) << r.err;
}

TEST_F(CliTest, InspectOfAnUnknownNameFailsClearly) {
  CliResult r = run("inspect attention.bf16.hd64.g4.contig.nhd.sm90a");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("unknown op family 'attention'"), std::string::npos) << r.err;

  r = run("inspect xqa.bf16.hd64.g4.p16.nhd.bogus.sm90a");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("unknown token 'bogus'"), std::string::npos) << r.err;
  EXPECT_TRUE(stored_names().empty());
}

TEST_F(CliTest, CacheLsExportClearImportVerify) {
  ASSERT_EQ(run("prewarm --config '" + config_ + "' --arch sm_90a -j 2 -q").code, 0);
  const std::set<std::string> names = stored_names();
  EXPECT_EQ(names, (std::set<std::string>{"decode.bf16.hd64.g4.contig.nhd.sm90a",
                                          "xqa.bf16.hd64.g4.p16.nhd.sm90a", "xqa.bf16.hd64.g4.p32.nhd.sm90a"}));
  // The text listing shows each key's prefix (one name can have several keys).
  const CliResult ls = run("cache ls");
  EXPECT_NE(ls.out.find("KEY"), std::string::npos) << ls.out;
  const json listed = run_json("cache ls --json");  // named: a temporary's ["entries"] would dangle in the loop
  for (const auto& e : listed["entries"])
    EXPECT_NE(ls.out.find(e["key"].get<std::string>().substr(0, 12)), std::string::npos) << ls.out;

  const std::string bundle = dir_ + "/bundle.sqlite3";
  CliResult r = run("cache export '" + bundle + "'");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("exported 3 entries"), std::string::npos) << r.out;
  EXPECT_EQ(run("cache clear").code, 0);
  EXPECT_TRUE(stored_names().empty());
  r = run("cache import '" + bundle + "'");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(stored_names(), names);

  json v = run_json("cache verify --json");
  EXPECT_EQ(v["checked"], 3);
  EXPECT_EQ(v["bad"], 0);
  EXPECT_EQ(v["ok"], true);

  // The imported kernels are served from the store: nothing recompiles.
  json again = run_json("prewarm --config '" + config_ + "' --arch sm_90a --json -q");
  EXPECT_EQ(again["present"], 3);
  EXPECT_EQ(again["compiled"], 0);

  json stats = run_json("cache stats --json");
  EXPECT_EQ(stats["entries"], 3);
  json gc = run_json("cache gc --max-size 0 --json");
  EXPECT_EQ(gc["entries"], 0);
}

TEST_F(CliTest, AnUnsupportedArchFailsClearly) {
  CliResult r = run("prewarm --config '" + config_ + "' --arch sm_70");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("sm_70"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sm_80 or newer"), std::string::npos) << r.err;
  // An arch NVRTC does not compile for is refused before anything compiles, even for --list.
  r = run("prewarm --config '" + config_ + "' --arch sm_91 --list");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("NVRTC"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sm_90"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(CliTest, UsageErrorsExitWithTwo) {
  EXPECT_EQ(run("no-such-command").code, 2);
  EXPECT_EQ(run("cache gc --max-size 12X").code, 2);
  EXPECT_EQ(run("prewarm").code, 2);  // --config is required
}

TEST_F(CliTest, ABadConfigNamesTheField) {
  std::ofstream(config_) << R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2,
                                "head_dim": 64, "ops": [{"op": "xqa", "page_sizes": [24]}]})";
  CliResult r = run("prewarm --config '" + config_ + "'");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0].page_sizes"), std::string::npos) << r.err;
}

// Every spec a bundled config generates, on every arch the variant matrix covers,
// reads back from its readable name and its JSON.
TEST_F(CliTest, BundledConfigsExpand) {
  for (const char* name : {"llama-3-8b", "llama-3-70b", "qwen2.5-72b", "mistral-7b", "deepseek-v3"}) {
    json j = run_json(std::string("prewarm --config ") + name + " --arch sm_80,sm_89,sm_90a,sm_100a,sm_120 --list --json");
    EXPECT_EQ(j["model"], name);
    EXPECT_FALSE(j["specs"].empty()) << name;
    for (const auto& sj : j["specs"]) {
      const spec::KernelSpec s = spec::KernelSpec::from_json(sj);
      EXPECT_EQ(spec::KernelSpec::from_name(s.name()), s) << s.name();
      // The wgmma MLA kernel (sm_90a) is the only trtllm-gen kernel a bundled decode config reaches.
      const bool wgmma_mla = s.family == spec::OpFamily::kMla && s.arch == spec::Arch{90, true};
      if (!wgmma_mla) EXPECT_EQ(s.backend, spec::Backend::kXqa) << s.name();
    }
  }
}

// The config's specs come from the op's own planning: its limits, its words.
TEST_F(CliTest, ConfigLimitsAreTheOps) {
  std::ofstream(config_, std::ios::trunc) << R"({"name": "x", "num_attention_heads": 128, "num_key_value_heads": 1,
                                "head_dim": 64, "ops": [{"op": "xqa"}]})";
  CliResult r = run("prewarm --config '" + config_ + "' --arch sm_90a --list");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("num_key_value_heads"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("head_group_ratio <= 64"), std::string::npos) << r.err;
  std::ofstream(config_, std::ios::trunc) << R"({"name": "x", "num_attention_heads": 8, "num_key_value_heads": 2,
                                "head_dim": 64, "ops": [{"op": "xqa", "page_sizes": [24]}]})";
  r = run("prewarm --config '" + config_ + "' --arch sm_90a --list");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ops[0].page_sizes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("16, 32, 64 or 128"), std::string::npos) << r.err;
}

// The configs are compiled in: a copy of the binary in a folder with no share/ next to it
// still finds them (it used to look only in share/attnjit/configs and the source tree).
TEST_F(CliTest, ACopiedBinaryFindsTheBundledConfigs) {
  fs::create_directories(dir_ + "/bin");
  fs::create_directories(dir_ + "/empty");
  fs::copy_file(ATTNJIT_CLI_PATH, dir_ + "/bin/attnjit");
  fs::permissions(dir_ + "/bin/attnjit", fs::perms::owner_exec, fs::perm_options::add);
  cli_ = dir_ + "/bin/attnjit";
  extra_env_ = "ATTNJIT_CONFIG_DIR='" + dir_ + "/empty'";
  json j = run_json("prewarm --config llama-3-8b --arch sm_90a --list --json");
  EXPECT_EQ(j["model"], "llama-3-8b");
  EXPECT_FALSE(j["specs"].empty()) << j.dump(2);
  // The source tree is still on this machine, so also check that each config's text is in the
  // binary itself, not only a path to it.
  std::ifstream bin(cli_, std::ios::binary);
  const std::string image((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  for (const auto& e : fs::directory_iterator(std::string(ATTNJIT_SOURCE_DIR) + "/tools/configs")) {
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(image.find(text), std::string::npos) << e.path() << " is not embedded in the binary";
  }
}

// A folder on disk ($ATTNJIT_CONFIG_DIR) overrides a built-in config of the same name and adds new ones.
TEST_F(CliTest, ConfigDirOverridesAndAddsToTheBundledConfigs) {
  fs::create_directories(dir_ + "/configs");
  std::ofstream(dir_ + "/configs/llama-3-8b.json")
      << R"({"name": "overridden", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
             "ops": [{"op": "decode"}]})";
  std::ofstream(dir_ + "/configs/extra-model.json") << kSmallConfig;
  extra_env_ = "ATTNJIT_CONFIG_DIR='" + dir_ + "/configs'";
  EXPECT_EQ(run_json("prewarm --config llama-3-8b --arch sm_90a --list --json")["model"], "overridden");
  EXPECT_EQ(run_json("prewarm --config extra-model --arch sm_90a --list --json")["model"], "cli-test-model");
  EXPECT_EQ(run_json("prewarm --config mistral-7b --arch sm_90a --list --json")["model"], "mistral-7b");
  CliResult r = run("prewarm --config no-such-model --list");
  EXPECT_EQ(r.code, 1) << r.all();
  for (const char* name : {"extra-model", "llama-3-8b", "qwen2.5-72b"})
    EXPECT_NE(r.err.find(name), std::string::npos) << name << " not listed in: " << r.err;
}

// A second command name used to replace the first: `cache ls clear` wiped the store.
TEST_F(CliTest, ASecondCommandNameIsAUsageError) {
  const std::string kernel = "decode.bf16.hd64.g4.contig.nhd.sm90a";
  ASSERT_EQ(run("prewarm --spec " + kernel + " -q").code, 0);
  for (const std::string& args :
       {std::string("cache ls clear"), std::string("cache ls stats"), std::string("cache gc --max-size 1G clear"),
        "prewarm -c '" + config_ + "' --list cache clear", "inspect " + kernel + " doctor",
        std::string("doctor cache clear"), std::string("cache stats ls --json")}) {
    CliResult r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.all();
    EXPECT_NE(r.err.find("not expected"), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.out.find("removed"), std::string::npos) << args << "\n" << r.out;
  }
  EXPECT_EQ(stored_names(), std::set<std::string>{kernel});
  // Global options still follow the command.
  const std::string other = dir_ + "/other";
  ASSERT_EQ(run("prewarm --spec " + kernel + " -q --cache-dir '" + other + "'").code, 0);
  json j = run_json("cache ls --json --cache-dir '" + other + "' -v");
  EXPECT_EQ(j["path"], other + "/cubins.sqlite3") << j.dump(2);
  EXPECT_EQ(j["entries"].size(), 1u);
  EXPECT_EQ(run("cache stats -vv").code, 0);
}

// 10000000T used to wrap to a negative limit and evict everything.
TEST_F(CliTest, AHugeOrHexMaxSizeIsAUsageError) {
  ASSERT_EQ(run("prewarm --spec decode.bf16.hd64.g4.contig.nhd.sm90a -q").code, 0);
  for (const char* size : {"10000000T", "1e19", "9223372036854775808", "8192P", "0x10", "inf", "-1", ""}) {
    CliResult r = run(std::string("cache gc --max-size '") + size + "'");
    EXPECT_EQ(r.code, 2) << size << "\n" << r.all();
    EXPECT_NE(r.err.find("--max-size"), std::string::npos) << size << "\n" << r.err;
  }
  EXPECT_EQ(stored_names().size(), 1u);
  json gc = run_json("cache gc --max-size 8388607T --json");  // just below 2^63 bytes
  EXPECT_EQ(gc["entries"], 1) << gc.dump();
  EXPECT_EQ(run_json("cache gc --max-size 1.5GiB --json")["entries"], 1);
}

// A cache folder that cannot be created: the store falls back to memory.
TEST_F(CliTest, AnUnusableCacheFolderFailsPrewarmExportAndDoctor) {
  std::ofstream(dir_ + "/a-file") << "x";
  cache_ = dir_ + "/a-file/cache";
  CliResult r = run("prewarm --spec decode.bf16.hd64.g4.contig.nhd.sm90a -q");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("prewarm: the cache in " + cache_ + " is not usable"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("compiled"), std::string::npos) << "compiled nothing: " << r.out;
  EXPECT_EQ(run("prewarm -c '" + config_ + "' --list").code, 0) << "--list needs no store";

  const std::string bundle = dir_ + "/bundle.sqlite3";
  r = run("cache export '" + bundle + "'");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("cache export: the cache in"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(bundle));

  r = run("cache import '" + dir_ + "/a-file'");  // an import that would not persist
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("cache import: the cache in"), std::string::npos) << r.err;

  r = run("doctor");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.out.find("health:     unusable: not file-backed"), std::string::npos) << r.out;
  json j = run_json("doctor --json", 1);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["cache"]["in_memory"], true);
}

TEST_F(CliTest, DoctorReportsAQuarantinedStore) {
  ASSERT_TRUE(fs::create_directories(cache_));
  fs::permissions(cache_, fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(cache_ + "/cubins.sqlite3") << std::string(8192, 'x');
  CliResult r = run("doctor");
  EXPECT_EQ(r.code, 1) << r.all();
  const std::string want = "health:     corrupt (quarantined to " + cache_ + "/cubins.sqlite3.corrupt-";
  EXPECT_NE(r.out.find(want), std::string::npos) << r.out;

  std::ofstream(cache_ + "/cubins.sqlite3", std::ios::trunc) << std::string(8192, 'y');
  json j = run_json("doctor --json", 1);
  EXPECT_EQ(j["ok"], false);
  const std::string moved = j["cache"].value("quarantined_to", "");
  EXPECT_EQ(moved.rfind(cache_ + "/cubins.sqlite3.corrupt-", 0), 0u) << j.dump(2);
  EXPECT_TRUE(fs::exists(moved)) << moved;
  EXPECT_EQ(run("doctor").code, 0) << "the fresh store is healthy";
}

TEST_F(CliTest, EmptyArchsAndBadJobCountsAreUsageErrors) {
  const std::string kernel = "decode.bf16.hd64.g4.contig.nhd";
  for (const std::string& args : {"prewarm --spec " + kernel + " --arch ''", "prewarm --spec " + kernel + " --arch ,",
                                  "prewarm --spec " + kernel + " --arch sm_90a,,sm_80",
                                  "inspect " + kernel + " --arch ''"}) {
    CliResult r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.all();
    EXPECT_NE(r.err.find("--arch"), std::string::npos) << args << "\n" << r.err;
  }
  for (const char* jobs : {"abc", "-1", "4097"}) {
    CliResult r = run(std::string("prewarm --spec ") + kernel + " --arch sm_90a -j " + jobs);
    EXPECT_EQ(r.code, 2) << jobs << "\n" << r.all();
    EXPECT_NE(r.err.find("jobs"), std::string::npos) << r.err;
    EXPECT_LT(r.err.size(), 400u) << "no 300-digit range: " << r.err;
  }
  EXPECT_TRUE(stored_names().empty());
}

TEST_F(CliTest, CacheExportRefusesAnExistingFileWithoutForce) {
  ASSERT_EQ(run("prewarm --spec decode.bf16.hd64.g4.contig.nhd.sm90a -q").code, 0);
  const std::string file = dir_ + "/precious.txt";
  std::ofstream(file) << "keep me";
  CliResult r = run("cache export '" + file + "'");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("already exists; pass --force"), std::string::npos) << r.err;
  std::ifstream in(file);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "keep me");
  r = run("cache export --force '" + file + "'");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("exported 1 entries"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace attnjit::cli_test

namespace attnjit::cli_test {
namespace {

// What an operator prewarms is what the op later looks up: after `attnjit
// prewarm`, the public prewarm API with the same shapes compiles nothing.
TEST_F(CliTest, PrewarmedKernelsServeTheOps) {
  ASSERT_EQ(run("prewarm --config '" + config_ + "' --arch sm_90a -j2").code, 0);
  RuntimeOptions o;
  o.cache_dir = cache_;
  Runtime rt(o);
  auto shape = [](DType d, std::initializer_list<int64_t> s) { return TensorView::contiguous(nullptr, d, s); };
  XqaArgs a;  // the config's xqa op: 8 q heads, 2 KV heads, head_dim 64, bf16, page 16
  a.q = shape(DType::kBFloat16, {4, 1, 8, 64});
  a.output = shape(DType::kBFloat16, {4, 1, 8, 64});
  a.k_cache = shape(DType::kBFloat16, {64, 16, 2, 64});
  a.v_cache = shape(DType::kBFloat16, {64, 16, 2, 64});
  a.page_table = shape(DType::kInt32, {4, 16});
  a.seq_lens = shape(DType::kUInt32, {4, 1});
  a.num_kv_heads = 2;
  a.page_size = 16;
  prewarm_xqa(a, "sm_90a", &rt);
  auto q = shape(DType::kBFloat16, {8, 64}), k = shape(DType::kBFloat16, {1000, 2, 64});
  prewarm_single_decode_with_kv_cache(q, k, k, q, {}, nullptr, "sm_90a", &rt);
  EXPECT_EQ(rt.stats().compiles, 0);
  EXPECT_EQ(rt.stats().store_hits, 2);
}

}  // namespace
}  // namespace attnjit::cli_test
