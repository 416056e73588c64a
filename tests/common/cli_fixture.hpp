// The CLI tests' fixture: a fresh folder per test (its cache at <dir>/cache), and
// `attnjit <args>` run as a child process with that cache, its stdout and stderr
// captured.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "common/shell_run.hpp"

#ifndef ATTNJIT_CLI_PATH
#define ATTNJIT_CLI_PATH ""
#endif

namespace attnjit::testing {

struct CliResult {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
  std::string all() const { return out + err; }
};

class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(ATTNJIT_CLI_PATH).empty()) GTEST_SKIP() << "the attnjit-cli target is not built";
    char tmpl[] = "/tmp/attnjit-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    cache_ = dir_ + "/cache";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // `attnjit <args>` through env(1): `env` (options such as -u first, then VAR=value words)
  // replaces the default ATTNJIT_CACHE_DIR=<this test's cache>; extra_env_ is added to both.
  CliResult run(const std::string& args, const std::string& env = "") const {
    const std::string err_file = dir_ + "/stderr.txt";
    const std::string vars = env.empty() ? "ATTNJIT_CACHE_DIR='" + cache_ + "'" : env;
    const std::string cmd = "env " + vars + " " + extra_env_ + " ATTNJIT_LOG_LEVEL=warn '" + cli_ + "' " + args;
    return shell_run<CliResult>(cmd, err_file);
  }

  // run(), expecting `expected_code` and JSON on stdout.
  nlohmann::json run_json(const std::string& args, int expected_code = 0) const {
    CliResult r = run(args);
    EXPECT_EQ(r.code, expected_code) << args << "\n" << r.all();
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << args << " printed no JSON:\n" << r.all();
    return j;
  }

  // A folder only its owner may use (the store refuses any other).
  static void make_private_dir(const std::string& d) {
    std::filesystem::create_directories(d);
    std::filesystem::permissions(d, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
  }

  std::string dir_, cache_;
  std::string cli_ = ATTNJIT_CLI_PATH;  // the binary run() starts
  std::string extra_env_;               // VAR=value words every run() adds
};

}  // namespace attnjit::testing
