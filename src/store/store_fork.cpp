// Fork safety of SqliteStore: no SQLite connection to a file crosses fork().
//
// Why: POSIX locks are not inherited, but SQLite's unix VFS keeps per-process
// lock and -shm state. A child that reuses (or merely abandons) the parent's
// connection and opens another one believes it holds the parent's locks while
// holding none, so other processes may checkpoint, delete or rebuild the
// -wal/-shm under it (SIGBUS, "database disk image is malformed"). So before
// fork() every store's connection to its file is closed, with the store's
// mutex held across fork() so no call is half done; both sides reopen lazily.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "store/sqlite_store.hpp"

namespace attnjit::store {

namespace {

struct ForkRegistry {
  std::mutex mu;  // taken before any store's mu_, never after
  std::vector<SqliteStore*> stores;
};

// Never destroyed: a fork during static destruction must still find it.
ForkRegistry& fork_registry() {
  static ForkRegistry* registry = new ForkRegistry();
  return *registry;
}

}  // namespace

void SqliteStore::track_for_fork(SqliteStore* store) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    pthread_atfork(&SqliteStore::prepare_fork, &SqliteStore::after_fork_in_parent,
                   &SqliteStore::after_fork_in_child);
    std::atexit(&SqliteStore::flush_all_pending);
  });
  ForkRegistry& registry = fork_registry();
  std::lock_guard<std::mutex> lock(registry.mu);
  registry.stores.push_back(store);
}

void SqliteStore::untrack_for_fork(SqliteStore* store) {
  ForkRegistry& registry = fork_registry();
  std::lock_guard<std::mutex> lock(registry.mu);
  auto& stores = registry.stores;
  stores.erase(std::remove(stores.begin(), stores.end(), store), stores.end());
}

void SqliteStore::prepare_fork() {
  ForkRegistry& registry = fork_registry();
  registry.mu.lock();
  for (SqliteStore* store : registry.stores) {
    store->mu_.lock();  // waits for a call in another thread to finish
    store->release_for_fork_locked();
  }
}

void SqliteStore::after_fork_in_parent() {
  ForkRegistry& registry = fork_registry();
  for (SqliteStore* store : registry.stores) store->mu_.unlock();
  registry.mu.unlock();
}

void SqliteStore::after_fork_in_child() {
  ForkRegistry& registry = fork_registry();
  for (SqliteStore* store : registry.stores) {
    store->pending_ = Pending{};  // the parent's counts, which the parent will write
    // A memory store carries on with its copy (nothing of it is on disk); a
    // file store reopens through the pid check, as its own process.
    if (store->in_memory_ && store->db_) store->pid_ = getpid();
    store->mu_.unlock();
  }
  registry.mu.unlock();
}

// Stores that outlive exit() (the global Runtime's) still write their hit counts.
void SqliteStore::flush_all_pending() {
  ForkRegistry& registry = fork_registry();
  std::lock_guard<std::mutex> lock(registry.mu);
  for (SqliteStore* store : registry.stores) {
    std::lock_guard<std::mutex> store_lock(store->mu_);
    if (!store->db_ || getpid() != store->pid_) continue;
    try {
      store->flush_pending_locked();
    } catch (...) {
      // Losing a few hit counts is fine; an admin read or exit must not fail for them.
    }
  }
}

void SqliteStore::release_for_fork_locked() {
  if (!db_ || getpid() != pid_) return;  // nothing open, or already inherited unclosed
  try {
    if (in_memory_) {
      // Only an attached file has locks to lose; the memory itself is copied.
      if (has_ro_) {
        db_->exec("DETACH DATABASE ro");
        has_ro_ = false;
        reattach_ro_ = true;
      }
      return;
    }
    db_->skip_checkpoint_on_close();
  } catch (const SqliteError&) {
    // Could not detach: close the whole connection instead; it reopens.
  }
  close_connection_locked();
}

}  // namespace attnjit::store
