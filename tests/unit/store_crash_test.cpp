// Reliability goals of src/store/, measured: 200 kill -9 rounds at random points during
// prewarm, gc, export and import with `cache verify` clean after each, and a full disk
// (a small tmpfs in a private mount namespace) that fails puts clearly and harms nothing.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.hpp"
#include "common/store_fixtures.hpp"
#include "common/temp_dir.hpp"
#include "store/cubin_store.hpp"

#ifndef ATTNJIT_CLI_PATH
#define ATTNJIT_CLI_PATH ""
#endif

namespace attnjit::store {
namespace {

namespace fs = std::filesystem;
using ::attnjit::testing::TempDir;

const std::string kWorker = std::string(ATTNJIT_TEST_TOOLS_DIR) + "/store_worker";
const std::string kCli = ATTNJIT_CLI_PATH;

// A store worker or the CLI, its stdout on a pipe (read end in *out_fd), stderr discarded.
pid_t spawn(const std::vector<std::string>& args, int* out_fd) { return ::attnjit::testing::spawn(args, out_fd, true); }
bool wait_ready(int fd) { return ::attnjit::testing::wait_first_byte(fd); }
using ::attnjit::testing::wait_exit_code;

// Runs a shell command line; returns its exit code and stdout+stderr in *out.
int shell(const std::string& cmd, std::string* out) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// `attnjit cache verify` when the CLI is built (its exit code is what an operator
// sees), else the same checks in process.
void expect_verify_clean(const std::string& dir, const std::string& when) {
  if (!kCli.empty()) {
    std::string out;
    const int code = shell("ATTNJIT_LOG_LEVEL=warn '" + kCli + "' --cache-dir '" + dir + "' cache verify", &out);
    EXPECT_EQ(code, 0) << when << ":\n" << out;
    return;
  }
  auto store = fixtures::open_store(dir);
  const auto st = store->stats();
  const auto r = store->verify(false);
  EXPECT_FALSE(st.in_memory) << when << ": " << st.note;
  EXPECT_TRUE(r.integrity_ok && r.bad == 0 && r.problems.empty()) << when << ": " << st.note;
}

// Five kernels (about 1.2 s with -j 2), so that the kill, 50 to 900 ms in, lands mid-compile.
constexpr const char* kConfig = R"({"name": "crash-test", "num_attention_heads": 8, "num_key_value_heads": 2,
  "head_dim": 64, "dtype": "bf16", "ops": [{"op": "decode"}, {"op": "xqa", "page_sizes": [16, 32, 64, 128]}]})";

TEST(StoreCrashTest, TwoHundredKillNineRoundsDuringPrewarmGcExportAndImport) {
  TempDir tmp("crash");
  const std::string dir = tmp.sub("cache");
  const std::string bundle_out = tmp.sub("out.sqlite3");
  const std::string bundle_in = tmp.sub("in.sqlite3");
  {
    auto src = fixtures::open_store(tmp.sub("src"));
    for (int i = 0; i < 24; ++i) ASSERT_TRUE(src->put(fixtures::make_entry("b" + std::to_string(i), 8192)));
    ASSERT_EQ(src->export_to(bundle_in), 24);
  }
  std::ofstream(tmp.sub("model.json")) << kConfig;
  const char* kCompileArchs[] = {"sm_80", "sm_89", "sm_90a", "sm_120"};
  std::mt19937 rng(20261201);
  int cli_rounds = 0, killed_mid_op = 0, rounds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < 200; ++round) {
    const std::string when = "round " + std::to_string(round);
    ++rounds;
    if (!kCli.empty() && round % 50 == 49) {
      // A real prewarm (NVRTC), killed at a random point of its compiles.
      int fd = -1;
      const pid_t pid = spawn({kCli, "--cache-dir", dir, "prewarm", "--config", tmp.sub("model.json"), "--arch",
                               kCompileArchs[cli_rounds++ % 4], "-j", "2", "-q"}, &fd);
      // The read end stays open until the child is gone: prewarm prints (a skipped op's
      // note) before its compiles, and a closed pipe would end it by SIGPIPE, not kill -9.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 900)(rng)));
      kill(pid, SIGKILL);
      const int code = wait_exit_code(pid);
      close(fd);
      EXPECT_TRUE(code == 128 + SIGKILL || code == 0) << when << ": prewarm exited " << code;
      killed_mid_op += code != 0;
      expect_verify_clean(dir, when + " (prewarm)");
      continue;
    }
    // Synthetic prewarm (puts with eviction), gc, export and import, by turns; every
    // fifth round a second process works on the store at the same time.
    std::vector<std::vector<std::string>> jobs;
    auto job = [&](int kind) -> std::vector<std::string> {
      switch (kind % 4) {
        case 0: return {kWorker, "writer", dir, "65536", std::to_string(2 << 20)};
        case 1: return {kWorker, "gc", dir, "16384"};
        case 2: return {kWorker, "export", dir, bundle_out};
        default: return {kWorker, "import", dir, bundle_in};
      }
    };
    jobs.push_back(job(round));
    if (round % 5 == 4) jobs.push_back(job(round + 1 + round / 5));
    // Every seventh round kills while the store is still opening (a fresh file, migrations,
    // the lock); the others once a first operation has committed.
    const bool at_open = round % 7 == 3;
    std::vector<pid_t> pids;
    std::vector<int> open_fds;  // kept open until the kill, so that no 'r' meets a closed pipe
    for (const auto& args : jobs) {
      int fd = -1;
      pids.push_back(spawn(args, &fd));
      if (at_open) open_fds.push_back(fd);
      else EXPECT_TRUE(wait_ready(fd)) << when << ": " << args[1] << " never finished a first operation";
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 20000)(rng)));
    for (pid_t pid : pids) {
      kill(pid, SIGKILL);
      EXPECT_EQ(wait_exit_code(pid), 128 + SIGKILL) << when;
      ++killed_mid_op;
    }
    for (int fd : open_fds) close(fd);
    expect_verify_clean(dir, when);
    // A killed export never leaves a half-written bundle under the target's name.
    if (round % 4 == 2 && fs::exists(bundle_out)) {
      auto scratch = fixtures::open_store(tmp.sub("scratch"));
      const ImportReport r = scratch->import_bundle(bundle_out);
      EXPECT_EQ(r.bad, 0) << when;
      scratch->clear();
    }
    if (HasFailure()) break;  // one broken round is enough to read
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[          ] %d rounds, %d processes killed, in %.1f s\n", rounds, killed_mid_op, seconds);
  EXPECT_EQ(rounds, 200);
  EXPECT_TRUE(fs::is_empty(dir) || [&] {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().find("corrupt") != std::string::npos) return false;
    return true;
  }()) << "nothing was ever quarantined";
  // The last rounds may leave nothing (a gc to a tiny cap, then a prewarm killed
  // before its first compile), so one more writer commits a row and is killed too:
  // the store still takes writes after the 200 rounds, and the check below reads at
  // least one entry.
  {
    int fd = -1;
    const pid_t pid = spawn({kWorker, "writer", dir, "65536", std::to_string(2 << 20)}, &fd);
    EXPECT_TRUE(wait_ready(fd)) << "a writer after the rounds never committed a row";
    kill(pid, SIGKILL);
    EXPECT_EQ(wait_exit_code(pid), 128 + SIGKILL);
  }
  expect_verify_clean(dir, "after the rounds");
  // Every entry left reads back (its checksum holds).
  auto store = fixtures::open_store(dir);
  const auto entries = store->list();
  EXPECT_FALSE(entries.empty());
  for (const auto& info : entries) EXPECT_TRUE(store->get(info.key).has_value()) << info.key;
}

// A small tmpfs, mounted in a private mount namespace so nothing outside sees it.
TEST(StoreCrashTest, AFullDiskFailsPutsClearlyAndKeepsTheStoreConsistent) {
  std::string probe;
  if (shell("unshare -m --propagation private true", &probe) != 0)
    GTEST_SKIP() << "cannot make a private mount namespace here (unshare -m): " << probe;
  TempDir tmp("full");
  const std::string mnt = tmp.sub("mnt");
  fs::create_directory(mnt);
  std::ofstream(tmp.sub("model.json")) << kConfig;
  // 1 MiB holds a few 64 KiB entries; then every put fails with "disk is full".
  std::string script = "mount -t tmpfs -o size=1m,mode=0700 tmpfs '" + mnt + "' || exit 77\n" +
                       "'" + kWorker + "' fill '" + mnt + "/cache' 65536; echo \"fill=$?\"\n";
  if (!kCli.empty()) {
    const std::string cli = "ATTNJIT_LOG_LEVEL=warn '" + kCli + "' --cache-dir '" + mnt + "/cache' ";
    script += cli + "cache verify; echo \"verify=$?\"\n" +
              cli + "prewarm --config '" + tmp.sub("model.json") + "' --arch sm_90a -q; echo \"prewarm=$?\"\n" +
              cli + "cache verify; echo \"verify_after_prewarm=$?\"\n";
  }
  std::ofstream(tmp.sub("full.sh")) << script;
  std::string out;
  const int code = shell("unshare -m --propagation private sh '" + tmp.sub("full.sh") + "'", &out);
  if (code == 77) GTEST_SKIP() << "cannot mount a tmpfs in a private namespace here:\n" << out;
  EXPECT_NE(out.find("fill=0"), std::string::npos) << out;
  EXPECT_NE(out.find("write_error="), std::string::npos) << out;
  EXPECT_NE(out.find("disk is full"), std::string::npos) << "the failure says why:\n" << out;
  if (!kCli.empty()) {
    EXPECT_NE(out.find("verify=0"), std::string::npos) << out;
    // prewarm compiles (the kernels serve from memory) but says the store did not keep them.
    EXPECT_NE(out.find("prewarm=1"), std::string::npos) << out;
    EXPECT_NE(out.find("compiled, but the store did not keep it"), std::string::npos) << out;
    EXPECT_NE(out.find("verify_after_prewarm=0"), std::string::npos) << out;
  }
  EXPECT_TRUE(fs::is_empty(mnt)) << "the tmpfs was private to the namespace";
}

}  // namespace
}  // namespace attnjit::store
