// Tests of src/store/store_location.cpp and reopening: lock waits, absolute paths and URIs, refused reopens.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "attnjit/error.hpp"
#include "common/child_process.hpp"
#include "common/log_capture.hpp"
#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "store/cubin_store.hpp"
#include "store/store_location.hpp"

namespace attnjit::store {
namespace {

using fixtures::make_entry;
using fixtures::open_store;

namespace fs = std::filesystem;
using TempDir = ::attnjit::testing::TempDir;
using ::attnjit::testing::LogCapture;

using ::attnjit::testing::wait_exit_code;

// A child that takes flock(op) on lock_path and then waits to be killed, like
// a process stopped while holding it. Returns its pid once the lock is held.
pid_t hold_flock(const std::string& lock_path, int op) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    int fd = open(lock_path.c_str(), O_CREAT | O_RDWR, 0600);
    const char held = fd >= 0 && flock(fd, op) == 0 ? 'l' : 'x';
    if (write(fds[1], &held, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(fds[1]);
  char held = 0;
  const bool ok = read(fds[0], &held, 1) == 1 && held == 'l';
  close(fds[0]);
  if (!ok && pid > 0) {
    kill(pid, SIGKILL);
    wait_exit_code(pid);
    return -1;
  }
  return pid;
}

// Opens the store in a thread; a hang past 60 s fails the test (the holder is
// then killed, so the thread finishes).
std::unique_ptr<CubinStore> open_within_bound(const std::string& dir, pid_t holder) {
  auto opening = std::async(std::launch::async, [&] { return open_store(dir, 4LL << 30, 300); });
  if (opening.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "opening the store hangs while another process holds its lock";
    kill(holder, SIGKILL);
  }
  return opening.get();
}

TEST(StoreLocationTest, LockHeldByAStoppedProcessDoesNotHangOpen) {
  TempDir tmp;
  pid_t holder = hold_flock(tmp.sub("cubins.sqlite3.lock"), LOCK_EX);
  ASSERT_GT(holder, 0);
  auto store = open_within_bound(tmp.path(), holder);
  auto st = store->stats();
  EXPECT_TRUE(st.in_memory);
  EXPECT_NE(st.note.find("cubins.sqlite3.lock"), std::string::npos) << st.note;
  ASSERT_TRUE(store->put(make_entry("m", 1000)));
  EXPECT_TRUE(store->get("m").has_value());
  kill(holder, SIGKILL);
  wait_exit_code(holder);
  auto later = open_store(tmp.path());
  EXPECT_FALSE(later->stats().in_memory) << later->stats().note;
}

TEST(StoreLocationTest, LockHeldByAStoppedProcessDoesNotHangQuarantine) {
  TempDir tmp;
  const std::string db = tmp.sub("cubins.sqlite3");
  std::ofstream(db) << "not a database, to be quarantined";
  pid_t holder = hold_flock(db + ".lock", LOCK_SH);
  ASSERT_GT(holder, 0);
  auto store = open_within_bound(tmp.path(), holder);
  auto st = store->stats();
  EXPECT_TRUE(st.in_memory);
  EXPECT_NE(st.note.find("cubins.sqlite3.lock"), std::string::npos) << st.note;
  EXPECT_TRUE(fs::exists(db)) << "not moved without the exclusive lock";
  ASSERT_TRUE(store->put(make_entry("m", 1000)));
  EXPECT_TRUE(store->get("m").has_value());
  kill(holder, SIGKILL);
  wait_exit_code(holder);
}

class CwdGuard {
 public:
  CwdGuard() { saved_ = getcwd(buf_, sizeof(buf_)) != nullptr; }
  ~CwdGuard() {
    if (saved_ && chdir(buf_) != 0) std::abort();
  }

 private:
  char buf_[PATH_MAX];
  bool saved_ = false;
};

TEST(StoreLocationTest, RelativeFolderIsMadeAbsoluteAtOpen) {
  TempDir a, b;
  CwdGuard cwd;
  ASSERT_EQ(chdir(a.path().c_str()), 0);
  auto store = open_store("rel");
  ASSERT_TRUE(store->put(make_entry("x", 1000)));
  EXPECT_EQ(store->path().front(), '/') << store->path();
  ASSERT_EQ(chdir(b.path().c_str()), 0);
  EXPECT_TRUE(fs::equivalent(store->path(), a.sub("rel/cubins.sqlite3")));
  // A fork child reopens: it must reopen the same file, whatever the folder now is.
  pid_t pid = fork();
  if (pid == 0) _exit(store->get("x").has_value() ? 0 : 1);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(wait_exit_code(pid), 0);
  EXPECT_TRUE(store->get("x").has_value());
  EXPECT_FALSE(fs::exists(b.sub("rel"))) << "a second cache was made in the new folder";
}

TEST(StoreLocationTest, SqliteUriIsAbsoluteAndEscaped) {
  EXPECT_EQ(sqlite_uri("/tmp/x", "mode=ro"), "file:///tmp/x?mode=ro");
  EXPECT_EQ(sqlite_uri("//tmp/x", "mode=ro"), "file:///tmp/x?mode=ro") << "no host authority";
  EXPECT_EQ(sqlite_uri("/a//./b/", ""), "file:///a/b");
  EXPECT_EQ(sqlite_uri("/a/b?c#d%e", ""), "file:///a/b%3Fc%23d%25e");
  char cwd[PATH_MAX];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(sqlite_uri("rel.db", ""), "file://" + std::string(cwd) + "/rel.db");
}

TEST(StoreLocationTest, ImportAndReadOnlyAttachWorkWithOddPaths) {
  TempDir tmp;
  const std::string dir = tmp.sub("we?ird#na%me");
  {
    auto store = open_store(dir);
    ASSERT_TRUE(store->put(make_entry("x", 1000)));
    ASSERT_EQ(store->export_to(tmp.sub("bundle.sqlite3")), 1);
  }
  auto dst = open_store(tmp.sub("dst"));
  EXPECT_EQ(dst->import_from("/" + tmp.sub("bundle.sqlite3")), 1) << "a //-path is not a host";
  StoreOptions options;
  options.dir = "/" + dir;
  options.read_only = true;
  auto ro = CubinStore::open(options);
  EXPECT_NE(ro->stats().note.find("read-only"), std::string::npos) << ro->stats().note;
  EXPECT_TRUE(ro->get("x").has_value()) << ro->stats().note;
}

// The folder became group-writable and the db was removed: the store must
// refuse to reopen there, and get/put/contains fall back rather than throw.
TEST(StoreLocationTest, RefusedReopenFallsBackToMemoryWithoutThrowing) {
  using Op = std::function<void(CubinStore&)>;
  const std::pair<const char*, Op> first_calls[] = {
      {"get", [](CubinStore& s) { EXPECT_FALSE(s.get("x").has_value()); }},
      {"put", [](CubinStore& s) { EXPECT_TRUE(s.put(make_entry("y", 500))); }},
      {"contains", [](CubinStore& s) { EXPECT_FALSE(s.contains("x")); }},
  };
  for (const auto& [name, first_call] : first_calls) {
    SCOPED_TRACE(name);
    TempDir tmp;
    const std::string dir = tmp.sub("cache");
    auto store = open_store(dir);
    ASSERT_TRUE(store->put(make_entry("x", 1000)));
    ASSERT_EQ(chmod(dir.c_str(), 0770), 0);
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(dir + "/cubins.sqlite3" + suffix);
    LogCapture log;
    EXPECT_NO_THROW(first_call(*store));
    EXPECT_NE(log.text().find("refusing cache folder"), std::string::npos) << log.text();
    EXPECT_NO_THROW(EXPECT_TRUE(store->put(make_entry("z", 700))));
    std::optional<Entry> got;
    EXPECT_NO_THROW(got = store->get("z"));
    EXPECT_TRUE(got && got->cubin == make_entry("z", 700).cubin);
    auto st = store->stats();
    EXPECT_TRUE(st.in_memory);
    EXPECT_NE(st.note.find("refusing cache folder"), std::string::npos) << st.note;
    EXPECT_FALSE(fs::exists(dir + "/cubins.sqlite3")) << "nothing is written to a refused folder";
  }
}

// Cross-process single flight: a second claim on a key waits for the first (OFD locks
// conflict between open files, also in one process), a claim on another key does not, and
// a holder that never lets go costs the waiter its timeout, not a hang.
TEST(StoreCompileClaim, ASecondClaimOnAKeyWaitsForTheFirst) {
  TempDir dir("claim");
  auto st = open_store(dir.path());
  const std::string key = "0123456789abcdef0123456789abcdef";
  auto first = st->claim_compile(key, 1000);
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->waited());

  auto other = st->claim_compile("fedcba9876543210fedcba9876543210", 1000);
  ASSERT_NE(other, nullptr);
  EXPECT_FALSE(other->waited()) << "another key is another byte";

  const auto t0 = std::chrono::steady_clock::now();
  auto timed_out = st->claim_compile(key, 200);
  const auto waited_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_NE(timed_out, nullptr);
  EXPECT_TRUE(timed_out->waited());
  EXPECT_GE(waited_ms, 190);
  EXPECT_LT(waited_ms, 5000);

  // Released by the holder: the waiter gets it well before its timeout.
  auto waiter = std::async(std::launch::async, [&] {
    auto c = st->claim_compile(key, 20000);
    return c && c->waited();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  first.reset();
  EXPECT_EQ(waiter.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(waiter.get());

  // A store with no file behind it has nothing to share.
  StoreOptions mem;
  mem.dir = dir.sub("a-file/cache");
  std::ofstream(dir.sub("a-file")) << "x";
  EXPECT_EQ(CubinStore::open(mem)->claim_compile(key, 100), nullptr);
}

}  // namespace
}  // namespace attnjit::store
