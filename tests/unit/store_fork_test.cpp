// Tests of src/store/ across fork(): no SQLite connection or lock state may cross into the child.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "store/cubin_store.hpp"

namespace attnjit::store {
namespace {

using fixtures::make_entry;
using fixtures::open_store;
using fixtures::same;

namespace fs = std::filesystem;
using TempDir = ::attnjit::testing::TempDir;
using namespace std::chrono_literals;

constexpr int kRows = 40;

// Puts <prefix>0..<prefix>N-1 (60 KB each) and reads each back; returns how many went wrong.
int write_and_read_back(CubinStore& store, const std::string& prefix) {
  int bad = 0;
  for (int i = 0; i < kRows; ++i) {
    const Entry want = make_entry(prefix + std::to_string(i), 60000);
    store.put(want);
    auto got = store.get(want.key);
    if (!got || !same(*got, want)) ++bad;
  }
  return bad;
}

using ::attnjit::testing::wait_exit_code;

// After the processes are gone: a healthy file, never quarantined, holding
// every row that was written, byte for byte.
void expect_store_intact(const std::string& dir, const std::vector<std::string>& prefixes) {
  auto store = open_store(dir);
  auto st = store->stats();
  EXPECT_FALSE(st.in_memory) << st.note;
  EXPECT_EQ(st.note.find("quarantined"), std::string::npos) << st.note;
  auto report = store->verify(false);
  EXPECT_TRUE(report.integrity_ok);
  EXPECT_EQ(report.bad, 0);
  for (const auto& p : fs::directory_iterator(dir)) {
    EXPECT_EQ(p.path().filename().string().find("corrupt"), std::string::npos) << p.path();
  }
  const Entry parent = make_entry("p", 100000);
  auto got = store->get("p");
  EXPECT_TRUE(got && same(*got, parent)) << "the parent's first row";
  for (const std::string& prefix : prefixes) {
    for (int i = 0; i < kRows; ++i) {
      const Entry want = make_entry(prefix + std::to_string(i), 60000);
      auto row = store->get(want.key);
      EXPECT_TRUE(row && same(*row, want)) << want.key;
    }
  }
  EXPECT_EQ(st.entries, 1 + kRows * static_cast<int64_t>(prefixes.size()));
}

// The parent closes its store, reopens it and writes while the child writes
// through the store object it inherited: each must hold real locks of its own.
TEST(StoreForkTest, ChildWritesWhileTheParentClosesReopensAndWrites) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->put(make_entry("p", 100000)));
  pid_t pid = fork();
  if (pid == 0) {
    // No gtest assertions in the child: the exit code says it all.
    std::this_thread::sleep_for(200ms);  // the parent has closed and reopened by now
    const int bad = write_and_read_back(*store, "c");
    const bool quarantined = store->stats().note.find("quarantined") != std::string::npos;
    _exit((bad != 0 ? 1 : 0) | (quarantined ? 2 : 0));
  }
  ASSERT_GT(pid, 0);
  store.reset();
  std::this_thread::sleep_for(100ms);
  auto again = open_store(tmp.path());
  EXPECT_EQ(write_and_read_back(*again, "d"), 0);
  again.reset();
  EXPECT_EQ(wait_exit_code(pid), 0) << "1: a row went wrong, 2: it quarantined, 135: SIGBUS";
  expect_store_intact(tmp.path(), {"c", "d"});
}

// A launcher opens the store, forks a worker and exits at once; a third,
// unrelated process writes meanwhile. The worker must not lose its -shm.
TEST(StoreForkTest, ChildOutlivesItsParentWhileAnotherProcessWrites) {
  TempDir tmp;
  for (int round = 0; round < 5; ++round) {
    const std::string dir = tmp.sub("r" + std::to_string(round));
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t launcher = fork();
    if (launcher == 0) {
      close(fds[0]);
      auto store = open_store(dir);
      const bool put_ok = store->put(make_entry("p", 100000));
      pid_t worker = fork();
      if (worker == 0) {
        const char verdict = write_and_read_back(*store, "c") == 0 ? 'k' : 'b';
        if (write(fds[1], &verdict, 1) != 1) _exit(3);
        _exit(0);
      }
      _exit(put_ok && worker > 0 ? 0 : 1);  // gone without closing, as after an exec or a crash
    }
    ASSERT_GT(launcher, 0);
    close(fds[1]);
    EXPECT_EQ(wait_exit_code(launcher), 0);
    {
      auto other = open_store(dir);
      EXPECT_EQ(write_and_read_back(*other, "d"), 0);
    }
    // No byte before EOF: the worker died (SIGBUS when its -shm was rebuilt).
    pollfd p{fds[0], POLLIN, 0};
    char verdict = 0;
    ASSERT_EQ(poll(&p, 1, 120000), 1) << "the worker hangs";
    EXPECT_EQ(read(fds[0], &verdict, 1), 1) << "the worker died, round " << round;
    EXPECT_EQ(verdict, 'k') << "a row went wrong in the worker, round " << round;
    close(fds[0]);
    expect_store_intact(dir, {"c", "d"});
  }
}

// A fork while another thread is inside a call: the child must find the
// store's mutex free and its own connection usable.
TEST(StoreForkTest, ForkWhileAnotherThreadIsInsideACall) {
  TempDir tmp;
  auto store = open_store(tmp.path());
  ASSERT_TRUE(store->put(make_entry("p", 100000)));
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    for (int i = 0; !stop.load(); ++i) {
      const std::string key = "t" + std::to_string(i % 50);
      store->put(make_entry(key, 20000));
      store->get(key);
    }
  });
  int failed_round = -1, code = 0;
  for (int round = 0; round < 10 && failed_round < 0; ++round) {
    std::this_thread::sleep_for(5ms);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(10);  // stuck on a mutex that no thread of the child will release: SIGALRM
      const Entry want = make_entry("child" + std::to_string(round), 3000);
      const bool ok = store->put(want) && store->get(want.key).has_value();
      _exit(ok ? 0 : 1);
    }
    code = wait_exit_code(pid);
    if (code != 0) failed_round = round;
  }
  stop = true;
  busy.join();
  EXPECT_EQ(failed_round, -1) << "exit code " << code << " (142: deadlocked)";
  for (int round = 0; round < 10; ++round) {
    EXPECT_TRUE(store->contains("child" + std::to_string(round))) << round;
  }
  EXPECT_TRUE(store->verify(false).integrity_ok);
}

// A memory store reading the file read-only (ATTACH) lets go of the file
// around fork(): both sides read it again afterwards, and keep their own
// in-memory entries.
TEST(StoreForkTest, ReadOnlyStoreReadsTheFileOnBothSidesOfAFork) {
  TempDir tmp;
  {
    auto writer = open_store(tmp.path());
    ASSERT_TRUE(writer->put(make_entry("p", 100000)));
  }
  StoreOptions options;
  options.dir = tmp.path();
  options.read_only = true;
  auto store = CubinStore::open(options);
  ASSERT_TRUE(store->put(make_entry("mem", 5000)));
  pid_t pid = fork();
  if (pid == 0) {
    auto shipped = store->get("p");
    const bool ok = shipped && same(*shipped, make_entry("p", 100000)) && store->get("mem") &&
                    store->put(make_entry("child", 100)) && store->stats().in_memory;
    _exit(ok ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  EXPECT_EQ(wait_exit_code(pid), 0);
  auto shipped = store->get("p");
  EXPECT_TRUE(shipped && same(*shipped, make_entry("p", 100000)));
  EXPECT_TRUE(store->get("mem").has_value());
  EXPECT_FALSE(store->contains("child")) << "the child's memory is its own";
  EXPECT_EQ(store->stats().entries, 2);
}

}  // namespace
}  // namespace attnjit::store
