// Tests of the answers of `attnjit cache` and `doctor` that an operator acts on: exit
// codes after quarantine, bad bundles and unusable folders; doctor changes nothing;
// a prewarmed database file holds its own entries.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/cli_fixture.hpp"
#include "common/store_fixtures.hpp"
#include "store/cubin_store.hpp"

namespace attnjit::cli_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Result = ::attnjit::testing::CliResult;
using CliCacheTest = ::attnjit::testing::CliFixture;

TEST_F(CliCacheTest, VerifyAfterQuarantiningACorruptStoreFails) {
  make_private_dir(cache_);
  std::ofstream(cache_ + "/cubins.sqlite3") << std::string(8192, 'x');
  Result r = run("cache verify");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.out.find("damaged: quarantined " + cache_ + "/cubins.sqlite3"), std::string::npos) << r.out;

  std::ofstream(cache_ + "/cubins.sqlite3", std::ios::trunc) << std::string(8192, 'y');
  r = run("cache verify --json");
  EXPECT_EQ(r.code, 1) << r.all();
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.all();
  EXPECT_EQ(j["ok"], false);
  ASSERT_EQ(j["problems"].size(), 1u) << j.dump(2);

  // The fresh store is clean, but the damaged files set aside are still mentioned.
  r = run("cache verify");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("2 quarantined file(s) beside the store (" + cache_ + "/cubins.sqlite3.corrupt-*)"),
            std::string::npos)
      << r.out;
  const json d = json::parse(run("doctor --json").out, nullptr, false);
  ASSERT_FALSE(d.is_discarded());
  EXPECT_EQ(d["ok"], true) << d.dump(2);
  EXPECT_EQ(d["cache"]["quarantine_files"], 2) << d.dump(2);
  EXPECT_NE(d["cache"].value("quarantine_note", "").find("cache gc"), std::string::npos) << d.dump(2);
}

// A mistyped --cache-dir: the commands that only read the store make no folder, say there is
// no store there, and list nothing (exit 0: a fresh machine's empty cache is not an error).
TEST_F(CliCacheTest, ReadingCommandsOnAMissingFolderMakeNothing) {
  cache_ = dir_ + "/typo/cache";
  for (const char* cmd : {"cache ls", "cache stats", "cache verify", "cache ls --json", "cache stats --json"}) {
    const Result r = run(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.all();
    EXPECT_NE(r.err.find("there is no store in " + cache_ + " yet"), std::string::npos) << cmd << "\n" << r.err;
    EXPECT_FALSE(fs::exists(dir_ + "/typo")) << cmd << " made the folder";
  }
  const json j = json::parse(run("cache stats --json").out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["created"], false);
  EXPECT_EQ(j["entries"], 0);
  const Result r = run("cache export '" + dir_ + "/bundle.sqlite3'");
  EXPECT_EQ(r.code, 1) << "nothing to export: " << r.all();
  EXPECT_FALSE(fs::exists(dir_ + "/typo"));
}

TEST_F(CliCacheTest, VerifyAndDoctorReportAWalWhoseDamageDroppedEntries) {
  {
    // Entries that sit only in the -wal: copied while a connection holds the store open.
    auto live = store::fixtures::open_store(dir_ + "/live");
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(live->put(store::fixtures::make_entry("k" + std::to_string(i), 6000)));
    make_private_dir(cache_);
    for (const char* suffix : {"", "-wal"})
      fs::copy_file(dir_ + "/live/cubins.sqlite3" + suffix, cache_ + "/cubins.sqlite3" + suffix);
  }
  const std::string wal = cache_ + "/cubins.sqlite3-wal";
  const std::string saved = dir_ + "/saved-wal";
  fs::copy_file(wal, saved);
  {
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(32 + 24 + 300);  // frame 0's page: SQLite drops it and every commit after it
    f.put('\x7f');
  }
  Result r = run("cache verify");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.out.find("damaged: " + wal + " is damaged: frame 0"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("committed transaction"), std::string::npos) << "a warning too:\n" << r.err;

  fs::remove(wal);
  fs::remove(cache_ + "/cubins.sqlite3-shm");
  fs::copy_file(saved, wal);
  {
    std::fstream f(wal, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(32 + 24 + 300);
    f.put('\x7f');
  }
  const json j = json::parse(run("doctor --json").out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["cache"]["health"].get<std::string>().rfind("damaged: " + wal, 0), 0u) << j.dump(2);
}

TEST_F(CliCacheTest, ImportOfABundleWhoseRowsAllFailTheirChecksumFails) {
  const std::string bundle = dir_ + "/bundle.sqlite3";
  {
    auto src = store::fixtures::open_store(dir_ + "/src");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(src->put(store::fixtures::make_entry("k" + std::to_string(i), 500)));
    ASSERT_EQ(src->export_to(bundle), 3);
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(bundle.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE entries SET checksum = 'forged'", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  const Result r = run("cache import '" + bundle + "'");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("3 rows of " + bundle + " failed their checksum"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("imported 0 entries"), std::string::npos) << r.out;
}

TEST_F(CliCacheTest, LsAndStatsOnAnUnusableFolderSayMemoryOnlyAndFail) {
  std::ofstream(dir_ + "/a-file") << "x";
  cache_ = dir_ + "/a-file/cache";
  for (const char* cmd : {"cache ls", "cache stats", "cache ls --json", "cache stats --json", "cache verify"}) {
    const Result r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.all();
    EXPECT_NE(r.err.find("the store is in memory only"), std::string::npos) << cmd << "\n" << r.err;
  }
  // What would change the file cannot, so it fails instead of reporting a clear or an eviction.
  for (const char* cmd : {"cache clear", "cache gc --max-size 0"}) {
    const Result r = run(cmd);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.all();
    EXPECT_NE(r.err.find("is not usable, so nothing would persist"), std::string::npos) << cmd << "\n" << r.err;
  }
}

TEST_F(CliCacheTest, DoctorCreatesNoFolderOrDatabase) {
  const std::string home = dir_ + "/missing-home";
  Result r = run("doctor", "-u ATTNJIT_CACHE_DIR -u XDG_CACHE_HOME HOME='" + home + "'");
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("health:     ok (no store yet"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(home)) << "doctor made " << home;

  make_private_dir(cache_);  // a folder without a store stays empty too
  const json j = json::parse(run("doctor --json").out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["cache"]["created"], false);
  EXPECT_EQ(j["cache"]["health"], "ok");
  EXPECT_EQ(j["ok"], true);
  EXPECT_TRUE(fs::is_empty(cache_));

  // A folder that cannot be made is not "ok".
  std::ofstream(dir_ + "/a-file") << "x";
  r = run("doctor", "ATTNJIT_CACHE_DIR='" + dir_ + "/a-file/cache'");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.out.find("health:     unusable: not file-backed: cannot create"), std::string::npos) << r.out;
}

TEST_F(CliCacheTest, AfterPrewarmTheDatabaseFileAloneHoldsTheEntries) {
  const Result r = run("prewarm --spec decode.bf16.hd64.g4.contig.nhd.sm90a -q");
  ASSERT_EQ(r.code, 0) << r.all();
  const std::string copy = dir_ + "/copy";
  make_private_dir(copy);
  fs::copy_file(cache_ + "/cubins.sqlite3", copy + "/cubins.sqlite3");  // no -wal
  auto store = store::fixtures::open_store(copy);
  EXPECT_EQ(store->stats().entries, 1) << "the entry was left in the -wal";
}

// Two prewarms of one kernel started together (a fleet's hosts sharing a cache folder): one
// compiles it, the other waits for its entry instead of compiling it too.
TEST_F(CliCacheTest, ConcurrentPrewarmsCompileAKernelOnce) {
  const std::string spec = "decode.bf16.hd64.g4.contig.nhd.sm90a";
  const std::string script = dir_ + "/two.sh";
  std::ofstream(script) << "export ATTNJIT_CACHE_DIR='" << cache_ << "' ATTNJIT_LOG_LEVEL=warn\n"
                        << "'" << ATTNJIT_CLI_PATH << "' prewarm --spec " << spec << " --json > '" << dir_ << "/a.json' &\n"
                        << "'" << ATTNJIT_CLI_PATH << "' prewarm --spec " << spec << " --json > '" << dir_ << "/b.json' &\n"
                        << "wait\n";
  const Result r = ::attnjit::testing::shell_run<Result>("sh '" + script + "'", dir_ + "/stderr.txt");
  ASSERT_EQ(r.code, 0) << r.all();
  int compiled = 0, present = 0;
  for (const char* name : {"/a.json", "/b.json"}) {
    std::ifstream in(dir_ + name);
    const json j = json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << name;
    compiled += j["compiled"].get<int>();
    present += j["present"].get<int>();
  }
  EXPECT_EQ(compiled, 1);
  EXPECT_EQ(present, 1);
}

}  // namespace
}  // namespace attnjit::cli_test
