// store_worker: a child process for the store tests (many processes on one store, kill -9).
//   store_worker mixed <dir> <threads> <iters> <keys> <seed>  gets/puts shared keys; exit 0 when
//                                                            every read matched byte for byte
//   store_worker writer <dir> <blob_bytes> <max_bytes>         puts new entries until killed;
//                                                            prints 'r' after the first put
//   store_worker gc <dir> <blob_bytes>                         puts and evicts (gc to a random cap)
//                                                            until killed; 'r' after the first gc
//   store_worker export <dir> <file>                           exports to <file> until killed;
//                                                            'r' after the first export
//   store_worker import <dir> <bundle>                         imports <bundle>, then evicts it all,
//                                                            until killed; 'r' after the first import
//   store_worker fill <dir> <blob_bytes>                       puts until a put fails (a full disk),
//                                                            then checks the store still serves
//   store_worker check <dir>                                 every entry matches its key's content
// Content is derived from the key, so any process can check any entry.
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "store/cubin_store.hpp"
#include "util/hash.hpp"

namespace {

using attnjit::store::CubinStore;
using attnjit::store::Entry;
using attnjit::store::StoreOptions;

std::atomic<int> g_errors{0};
std::mutex g_print_mu;

void report(const std::string& message) {
  ++g_errors;
  std::lock_guard<std::mutex> lock(g_print_mu);
  if (g_errors <= 20) std::fprintf(stderr, "store_worker[%d]: %s\n", getpid(), message.c_str());
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string derived_bytes(const std::string& seed_text, size_t n) {
  uint64_t state = attnjit::util::xxh64(seed_text);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = splitmix64(state);
    for (size_t j = 0; j < 8 && i + j < n; ++j) out[i + j] = static_cast<char>(v >> (8 * j));
  }
  return out;
}

// Writer keys are "w<bytes>-<pid>-<n>"; the others get a size from their hash.
size_t cubin_size_for(const std::string& key) {
  if (!key.empty() && key[0] == 'w') return std::strtoull(key.c_str() + 1, nullptr, 10);
  return 512 + attnjit::util::xxh64(key) % 49152;
}

Entry entry_for(const std::string& key) {
  Entry e;
  e.key = key;
  e.name = "name." + key;
  e.arch = "sm_90a";
  const size_t n = cubin_size_for(key);
  e.cubin = derived_bytes("cubin:" + key, n);
  e.ptx = derived_bytes("ptx:" + key, n / 8);
  e.meta_json = "{\"key\":\"" + key + "\"}";
  e.compile_ms = static_cast<double>(attnjit::util::xxh64(key) % 1000) / 8.0;
  return e;
}

bool same(const Entry& a, const Entry& b) {
  return a.key == b.key && a.name == b.name && a.arch == b.arch && a.cubin == b.cubin &&
         a.ptx == b.ptx && a.meta_json == b.meta_json && a.compile_ms == b.compile_ms;
}

void mixed_thread(CubinStore* shared, const std::string& dir, int t, int iters, int keys,
                  uint64_t seed) {
  try {
    std::unique_ptr<CubinStore> own;
    CubinStore* store = shared;
    if (t % 2 == 1) {  // half the threads share one object, half have their own connection
      StoreOptions options;
      options.dir = dir;
      own = CubinStore::open(options);
      store = own.get();
    }
    uint64_t rng = seed * 1000003ULL + static_cast<uint64_t>(t);
    for (int i = 0; i < iters; ++i) {
      const std::string key = "k" + std::to_string(splitmix64(rng) % keys);
      const uint64_t op = splitmix64(rng) % 10;
      if (op < 7) {
        if (auto got = store->get(key)) {
          if (!same(*got, entry_for(key))) report("get(" + key + ") returned different bytes");
          continue;
        }
        store->put(entry_for(key));
        auto again = store->get(key);
        if (!again) report("get(" + key + ") missed right after put");
        else if (!same(*again, entry_for(key))) report("get(" + key + ") after put differs");
      } else if (op == 7) {
        store->contains(key);
      } else if (op == 8) {
        auto st = store->stats();
        if (st.in_memory) report("store fell back to memory: " + st.note);
      } else {
        for (const auto& info : store->list()) {
          if (static_cast<size_t>(info.cubin_bytes) != cubin_size_for(info.key)) {
            report("list(): wrong size for " + info.key);
          }
        }
      }
    }
  } catch (const std::exception& e) {
    report(std::string("exception: ") + e.what());
  }
}

int run_mixed(const std::string& dir, int threads, int iters, int keys, uint64_t seed) {
  StoreOptions options;
  options.dir = dir;
  auto shared = CubinStore::open(options);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(mixed_thread, shared.get(), dir, t, iters, keys, seed);
  }
  for (auto& th : pool) th.join();
  return g_errors == 0 ? 0 : 1;
}

int run_writer(const std::string& dir, size_t blob_bytes, int64_t max_bytes) {
  StoreOptions options;
  options.dir = dir;
  options.max_bytes = max_bytes;
  auto store = CubinStore::open(options);
  for (uint64_t n = 0;; ++n) {
    const std::string key =
        "w" + std::to_string(blob_bytes) + "-" + std::to_string(getpid()) + "-" + std::to_string(n);
    store->put(entry_for(key));
    if (n == 0) {
      // Tells the parent a row is committed; it kills this process some time after.
      std::fputc('r', stdout);
      std::fflush(stdout);
    }
    if (n % 4 == 3) store->get(key);  // hit bookkeeping writes too
  }
}

void ready_once(bool* said) {
  if (*said) return;
  *said = true;
  std::fputc('r', stdout);
  std::fflush(stdout);
}

std::unique_ptr<CubinStore> open_dir(const std::string& dir) {
  StoreOptions options;
  options.dir = dir;
  return CubinStore::open(options);
}

int run_gc(const std::string& dir, size_t blob_bytes) {
  auto store = open_dir(dir);
  bool said = false;
  uint64_t rng = static_cast<uint64_t>(getpid());
  for (uint64_t n = 0;; ++n) {
    for (int i = 0; i < 4; ++i) {
      store->put(entry_for("w" + std::to_string(blob_bytes) + "-" + std::to_string(getpid()) + "-" +
                           std::to_string(n * 4 + i)));
    }
    const int64_t total = store->stats().total_bytes;
    store->gc(static_cast<int64_t>(splitmix64(rng) % static_cast<uint64_t>(total + 1)));
    ready_once(&said);
  }
}

int run_export(const std::string& dir, const std::string& file) {
  auto store = open_dir(dir);
  bool said = false;
  for (;;) {
    store->export_to(file);
    ready_once(&said);
  }
}

int run_import(const std::string& dir, const std::string& bundle) {
  auto store = open_dir(dir);
  bool said = false;
  for (;;) {
    store->import_from(bundle);
    ready_once(&said);
    store->gc(0);  // so that the next import writes every row again
  }
}

// On a small file system: puts until one fails, then every stored entry must still
// read back intact, verify must be clean and the store must keep serving gets and
// refusing puts without throwing afterwards. Prints "stored=<n>" and exits 0 when all of that holds.
int run_fill(const std::string& dir, size_t blob_bytes) {
  auto store = open_dir(dir);
  if (store->stats().in_memory) {
    report("fill: store is in memory from the start: " + store->stats().note);
    return 1;
  }
  std::vector<std::string> stored;
  bool failed = false;
  for (int n = 0; n < 100000 && !failed; ++n) {
    const std::string key = "w" + std::to_string(blob_bytes) + "-fill-" + std::to_string(n);
    if (store->put(entry_for(key))) stored.push_back(key);
    else failed = true;
  }
  if (!failed) report("fill: no put failed: the file system never filled");
  const auto st = store->stats();
  if (st.write_error.empty()) report("fill: stats().write_error does not say why the put failed");
  else std::printf("write_error=%s\n", st.write_error.c_str());
  for (const auto& key : stored) {
    auto got = store->get(key);
    if (!got || !same(*got, entry_for(key))) report("fill: " + key + " lost or changed after the disk filled");
  }
  auto verify = store->verify(false);
  if (!verify.integrity_ok || verify.bad != 0 || !verify.problems.empty()) report("fill: verify is not clean");
  // Still in service: another put fails cleanly (false, no throw) and gets still hit.
  if (store->put(entry_for("w65536-fill-again"))) std::printf("a later put found room\n");
  if (!stored.empty() && !store->get(stored.front())) report("fill: a get missed after the failed put");
  std::printf("stored=%zu\n", stored.size());
  return g_errors == 0 ? 0 : 1;
}

int run_check(const std::string& dir) {
  StoreOptions options;
  options.dir = dir;
  auto store = CubinStore::open(options);
  int64_t checked = 0;
  for (const auto& info : store->list()) {
    auto got = store->get(info.key);
    if (!got) {
      report("check: " + info.key + " listed but not readable");
    } else if (!same(*got, entry_for(info.key))) {
      report("check: " + info.key + " differs from its derived content");
    }
    ++checked;
  }
  auto verify = store->verify(false);
  if (!verify.integrity_ok) report("check: integrity_check failed");
  if (verify.bad != 0) report("check: " + std::to_string(verify.bad) + " checksum mismatches");
  auto st = store->stats();
  if (st.in_memory) report("check: store is in memory: " + st.note);
  std::printf("checked=%lld\n", static_cast<long long>(checked));
  return g_errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 6 && args[0] == "mixed") {
      return run_mixed(args[1], std::stoi(args[2]), std::stoi(args[3]), std::stoi(args[4]),
                       std::stoull(args[5]));
    }
    if (args.size() == 4 && args[0] == "writer") {
      return run_writer(args[1], std::stoull(args[2]), std::stoll(args[3]));
    }
    if (args.size() == 2 && args[0] == "check") return run_check(args[1]);
    if (args.size() == 3 && args[0] == "gc") return run_gc(args[1], std::stoull(args[2]));
    if (args.size() == 3 && args[0] == "export") return run_export(args[1], args[2]);
    if (args.size() == 3 && args[0] == "import") return run_import(args[1], args[2]);
    if (args.size() == 3 && args[0] == "fill") return run_fill(args[1], std::stoull(args[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_worker: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: store_worker mixed <dir> <threads> <iters> <keys> <seed>\n"
               "       store_worker writer <dir> <blob_bytes> <max_bytes>\n"
               "       store_worker gc|fill <dir> <blob_bytes>\n"
               "       store_worker export|import <dir> <file>\n"
               "       store_worker check <dir>\n");
  return 2;
}
