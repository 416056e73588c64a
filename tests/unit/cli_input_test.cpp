// Tests of the attnjit CLI on hostile or careless input (issue 14): bounded
// parsers, non-regular files, one error form, and no silent choices. Each runs
// the binary as a child process (under `timeout`: a hang fails, not blocks).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "common/shell_run.hpp"
#include "common/temp_dir.hpp"

#ifndef ATTNJIT_CLI_PATH
#define ATTNJIT_CLI_PATH ""
#endif

namespace attnjit::cli_input_test {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code = -1;
  std::string out, err;
  std::string all() const { return out + err; }
};

constexpr const char* kKernel = "decode.bf16.hd64.g4.contig.nhd";

// The binary under test: $ATTNJIT_TEST_CLI (to run these against another build,
// e.g. the one before a fix), else the one built with the tests.
std::string cli_path() {
  const char* env = std::getenv("ATTNJIT_TEST_CLI");
  return env && *env ? env : ATTNJIT_CLI_PATH;
}

// A model config with `ops` (JSON text) spliced in.
std::string config_with_ops(const std::string& ops) {
  return R"({"name": "m", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64, "ops": )" + ops + "}";
}

// `depth` nested arrays around 1.
std::string deep_array(int depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

class CliInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cli_path().empty()) GTEST_SKIP() << "the attnjit-cli target is not built";
    cache_ = dir_.sub("cache");
  }

  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = dir_.sub(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Runs `attnjit <args>` (a /bin/sh command line) against this test's cache.
  CliResult run(const std::string& args) const {
    const std::string err_file = dir_.sub("stderr.txt");
    const std::string cmd = "cd '" + dir_.path() + "' && ATTNJIT_CACHE_DIR='" + cache_ +
                            "' ATTNJIT_LOG_LEVEL=warn timeout 60 '" + cli_path() + "' " + args;
    return ::attnjit::testing::shell_run<CliResult>(cmd, err_file);
  }

  // Exit 1 with one short "attnjit: invalid argument: ..." line holding `want`.
  void expect_refused(const std::string& args, const std::string& want, int code = 1) const {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, code) << args << "\n" << r.all().substr(0, 2000);
    EXPECT_NE(r.err.find(want), std::string::npos) << args << "\n" << r.err.substr(0, 2000);
    EXPECT_EQ(r.err.rfind("attnjit: ", 0), 0u) << r.err.substr(0, 2000);
    EXPECT_LT(r.err.size(), 1200u) << args << ": " << r.err.substr(0, 2000);
  }

  testing::TempDir dir_{"cli-input"};
  std::string cache_;
};

// --- item 2: every parser bounded ---------------------------------------------

TEST_F(CliInputTest, DeeplyNestedSpecJsonIsRefusedNotACrash) {
  // 100,000 levels once overflowed the stack copying the field (exit 139).
  const std::string spec = write("deep.json", R"({"head_dim": )" + deep_array(100000) + "}");
  expect_refused("inspect '" + spec + "'", "nested deeper than");
  expect_refused("prewarm --list --spec '" + spec + "'", "nested deeper than");
}

TEST_F(CliInputTest, DeeplyNestedConfigIsRefusedNotACrash) {
  const std::string config =
      write("deep-config.json", config_with_ops(R"([{"op": "decode", "kv_layouts": )" + deep_array(100000) + "}]"));
  expect_refused("prewarm --list --config '" + config + "'", "nested deeper than");
}

TEST_F(CliInputTest, SpecFilesThatAreNotRegularFilesAreRefused) {
  // A symlink to /dev/zero once grew to gigabytes; a FIFO blocked forever.
  fs::create_symlink("/dev/zero", dir_.sub("zero.json"));
  expect_refused("inspect zero.json", "is a character device");
  ASSERT_EQ(mkfifo(dir_.sub("fifo.json").c_str(), 0600), 0);
  expect_refused("inspect fifo.json", "is a FIFO");
  fs::create_directory(dir_.sub("dir.json"));
  expect_refused("inspect dir.json", "is a directory");
  expect_refused("inspect missing.json", "no such file");
  write("big.json", "{\"head_dim\": 64" + std::string(2 << 20, ' ') + "}");
  expect_refused("inspect big.json", "over the limit");
}

TEST_F(CliInputTest, ConfigsThatAreNotRegularFilesSayWhatTheyAre) {
  // Each was once "no such file, and no bundled config of that name".
  fs::create_symlink("/dev/zero", dir_.sub("zero.json"));
  expect_refused("prewarm --list --config zero.json", "is a character device");
  ASSERT_EQ(mkfifo(dir_.sub("fifo.json").c_str(), 0600), 0);
  expect_refused("prewarm --list --config ./fifo.json", "is a FIFO");
  fs::create_directory(dir_.sub("conf.d"));
  expect_refused("prewarm --list --config conf.d", "is a directory");
}

TEST_F(CliInputTest, OverlongKernelNamesAreRefusedShortly) {
  expect_refused(std::string("inspect ") + kKernel + "." + std::string(100000, 'x'), "longer than 200 characters");
}

// --- item 5: errors in one form -----------------------------------------------

TEST_F(CliInputTest, UsageErrorsFromTheParserHaveTheCommonForm) {
  for (const char* args : {"inspect", "bogus-command", "prewarm --jobs abc --spec x", "cache gc"}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.all();
    EXPECT_EQ(r.err.rfind("attnjit: usage error: ", 0), 0u) << args << "\n" << r.err;
  }
  const CliResult r = run("cache");  // a group without its verb: help, then the error
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("\nattnjit: usage error: a subcommand is required"), std::string::npos) << r.err;
}

TEST_F(CliInputTest, ErrorsQuoteAtMostAFewHundredCharacters) {
  // Once the whole megabyte came back in the message.
  const std::string big(900000, 'a');
  write("unterminated.json", R"({"q_dtype": ")" + big);
  expect_refused("inspect unterminated.json", "not valid JSON");
  write("bigkey.json", "{\"" + big + "\": 1}");
  expect_refused("inspect bigkey.json", "unknown field");
  write("bigvalue.json", R"({"q_dtype": ")" + big + "\"}");
  expect_refused("inspect bigvalue.json", "dtype");
  write("bigconfig.json", config_with_ops(R"([{"op": "decode", "kv_layouts": [")" + big + "\"]}]"));
  expect_refused("prewarm --list --config bigconfig.json", "kv_layouts");
}

TEST_F(CliInputTest, ControlCharactersAreEscapedNeverPrintedRaw) {
  // An ANSI escape reached the terminal raw.
  const CliResult r = run("inspect \"$(printf '\\033[31mdecode')\"");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\\x1b[31mdecode"), std::string::npos) << r.err;
  // A \u0000 in a value cut the message short at the NUL.
  expect_refused(R"(inspect '{"q_dtype": "bf16\u0000\u001b[2J"}')", "control character");
  const CliResult nul = run(R"(inspect '{"q_dtype": "bf16\u0000\u001b[2J"}')");
  EXPECT_EQ(nul.err.find('\x1b'), std::string::npos) << nul.err;
  EXPECT_NE(nul.err.find("\\x00\\x1b[2J"), std::string::npos) << nul.err;
}

TEST_F(CliInputTest, ArchErrorsDoNotRepeatThePrefix) {
  for (const std::string& args : {std::string("inspect ") + kKernel + ".sm70", std::string("inspect ") + kKernel +
                                                                                    " --arch sm_70"}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.all();
    EXPECT_EQ(r.err.rfind("attnjit: invalid argument: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find("attnjit:", 1), std::string::npos) << "prefix repeated: " << r.err;
  }
}

TEST_F(CliInputTest, OpsOfTheWrongTypeSaySo) {
  write("ops-string.json", config_with_ops(R"("decode")"));
  const CliResult r = run("prewarm --list --config ops-string.json");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("got string \"decode\""), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("missing"), std::string::npos) << r.err;
  write("ops-empty.json", config_with_ops("[]"));
  expect_refused("prewarm --list --config ops-empty.json", "ops: empty");
  write("ops-missing.json", R"({"name": "m", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64})");
  expect_refused("prewarm --list --config ops-missing.json", "ops: missing");
}

// --- item 6: no silent choices --------------------------------------------------

TEST_F(CliInputTest, EmptyCacheDirIsAUsageError) {
  const CliResult r = run("--cache-dir '' cache stats");
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("--cache-dir"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(cache_)) << "the default folder was used";
}

TEST_F(CliInputTest, ArchInTheNameAndADifferentArchOptionAreRefused) {
  const std::string name = std::string(kKernel) + ".sm90a";
  expect_refused("prewarm --list --spec " + name + " --arch sm_100a", "--arch asks for sm_100a");
  expect_refused("inspect " + name + " --arch sm_100a", "names sm_90a");
  expect_refused(R"(prewarm --list --spec '{"arch": "sm_90a"}' --arch sm_80)", "--arch asks for sm_80");
  // The same arch twice is no conflict.
  const CliResult r = run("prewarm --list --spec " + name + " --arch sm_90a");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(r.out, name + "\n");
}

TEST_F(CliInputTest, DuplicateJsonKeysAreErrors) {
  expect_refused(R"(prewarm --list --spec '{"head_dim": 64, "head_dim": 128}')", "duplicate key \"head_dim\"");
  write("dup.json", R"({"name": "m", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
                        "head_dim": 128, "ops": [{"op": "decode"}]})");
  expect_refused("prewarm --list --config dup.json", "duplicate key \"head_dim\"");
}

TEST_F(CliInputTest, ByteCountsAreWhole) {
  for (const char* size : {"1.5", "1.5B", "0.5", "1.1K", "1.0000001G"}) {
    const CliResult r = run(std::string("cache gc --max-size ") + size);
    EXPECT_EQ(r.code, 2) << size << "\n" << r.all();
    EXPECT_NE(r.err.find("--max-size"), std::string::npos) << r.err;
  }
  EXPECT_NE(run("cache gc --max-size 1.5").err.find("give a unit"), std::string::npos);
  for (const char* size : {"1.5K", "1.5GiB", "0.25M", "2.0", "4096"}) {
    const CliResult r = run(std::string("cache gc --max-size ") + size);
    EXPECT_EQ(r.code, 0) << size << "\n" << r.all();
  }
}

TEST_F(CliInputTest, GcSaysWhenItDeletesQuarantinedFiles) {
  ASSERT_EQ(run("cache gc --max-size 1G").code, 0);  // makes the store (stats only reads it)
  std::string db;
  for (const auto& e : fs::directory_iterator(cache_))
    if (e.path().extension() == ".sqlite3") db = e.path().string();
  ASSERT_FALSE(db.empty());
  for (int t = 1; t <= 5; ++t) write("cache/" + fs::path(db).filename().string() + ".corrupt-" + std::to_string(t) + "-1", "x");
  CliResult r = run("cache gc --max-size 1G");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("deleted 2 old quarantined file(s)"), std::string::npos) << r.out;
  r = run("cache gc --max-size 1G");  // nothing left to delete: nothing said
  EXPECT_EQ(r.out.find("quarantined"), std::string::npos) << r.out;
}

// An override folder is where operators test a config: its schema errors name the file, and
// a folder that is not there is an error, not a silent fall-back to the built-in configs.
TEST_F(CliInputTest, ConfigDirOverrideErrorsNameTheFileAndAMissingFolderIsAnError) {
  fs::create_directories(dir_.sub("configs"));
  const std::string file = write("configs/llama-3-8b.json", config_with_ops(R"([{"op": "xqa", "page_sizes": [3]}])"));
  // The child inherits this process's environment.
  struct ConfigDir {
    explicit ConfigDir(const std::string& d) { setenv("ATTNJIT_CONFIG_DIR", d.c_str(), 1); }
    ~ConfigDir() { unsetenv("ATTNJIT_CONFIG_DIR"); }
  };
  std::optional<ConfigDir> env(std::in_place, dir_.sub("configs"));
  CliResult r = run("prewarm --list --config llama-3-8b");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("config '" + file + "': model config: ops[0].page_sizes"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("attnjit:", 1), std::string::npos) << "one prefix: " << r.err;

  env.reset();
  env.emplace(dir_.sub("no-such-folder"));
  r = run("prewarm --list --config llama-3-8b");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("ATTNJIT_CONFIG_DIR '" + dir_.sub("no-such-folder") + "' is not a folder"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace attnjit::cli_input_test
