// Tests of the store's deferred hit bookkeeping (src/store/store_ops.cpp): a warm read
// writes nothing, and the counts still reach the file (admin reads, exit).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "store/cubin_store.hpp"

namespace attnjit::store {
namespace {

namespace fs = std::filesystem;
using fixtures::make_entry;
using fixtures::open_store;
using TempDir = ::attnjit::testing::TempDir;

uintmax_t wal_bytes(const std::string& dir) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(dir + "/cubins.sqlite3-wal", ec);
  return ec ? 0 : n;
}

int64_t hits_of(const std::string& dir, const std::string& key) {
  auto store = open_store(dir);
  for (const EntryInfo& info : store->list())
    if (info.key == key) return info.hits;
  return -1;
}

// A warm start reads one row. Writing its hit count there and then cost a -wal
// creation and a directory sync (8 ms on a slow disk): the read must write nothing.
TEST(StorePendingTest, AWarmReadWritesNothing) {
  TempDir tmp;
  open_store(tmp.path())->put(make_entry("k", 4000));  // closed: the -wal is folded in
  ASSERT_EQ(wal_bytes(tmp.path()), 0u);
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->get("k").has_value());
  ASSERT_TRUE(store->get("k").has_value());
  EXPECT_EQ(wal_bytes(tmp.path()), 0u) << "a hit wrote its count at once";
  store.reset();
  EXPECT_EQ(hits_of(tmp.path(), "k"), 2) << "closing the store writes the counts";
}

// The global Runtime's store is never destroyed: its counts are written at exit().
TEST(StorePendingTest, ALeakedStoreWritesItsCountsAtExit) {
  TempDir tmp;
  open_store(tmp.path())->put(make_entry("k", 4000));
  const pid_t pid = fork();
  if (pid == 0) {
    CubinStore* leaked = open_store(tmp.path()).release();
    const bool ok = leaked->get("k").has_value() && leaked->get("k").has_value() && leaked->get("k").has_value();
    std::exit(ok ? 0 : 1);  // exit, not _exit: the atexit handlers run
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(hits_of(tmp.path(), "k"), 3);
}

// Within one process an admin read sees every store's counts, as before.
TEST(StorePendingTest, StatsSeeTheCountsOfEveryStoreInTheProcess) {
  TempDir tmp;
  auto writer = open_store(tmp.path());
  ASSERT_TRUE(writer->put(make_entry("k", 4000)));
  auto reader = open_store(tmp.path());
  ASSERT_TRUE(reader->get("k").has_value());
  EXPECT_EQ(writer->stats().hits, 1);
}

}  // namespace
}  // namespace attnjit::store
