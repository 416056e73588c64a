#include "store/sqlite_db.hpp"

#include <sqlite3.h>

namespace attnjit::store {

SqliteError::SqliteError(int code, const std::string& message)
    : std::runtime_error(message + " (" + sqlite3_errstr(code) + ", code " + std::to_string(code) +
                         ")"),
      code_(code) {}

bool SqliteError::corrupt() const noexcept {
  return primary() == SQLITE_CORRUPT || primary() == SQLITE_NOTADB;
}
bool SqliteError::readonly() const noexcept {
  return primary() == SQLITE_READONLY || primary() == SQLITE_PERM || primary() == SQLITE_CANTOPEN;
}
bool SqliteError::busy() const noexcept {
  return primary() == SQLITE_BUSY || primary() == SQLITE_LOCKED;
}

static std::string errmsg(sqlite3* db) { return db ? sqlite3_errmsg(db) : "no connection"; }

// --- Stmt ---------------------------------------------------------------------

Stmt::Stmt(sqlite3* db, std::string_view sql) : db_(db) {
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = "prepare '" + std::string(sql.substr(0, 80)) + "': " + errmsg(db_);
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
    throw SqliteError(sqlite3_extended_errcode(db_) ? sqlite3_extended_errcode(db_) : rc, msg);
  }
}

Stmt::~Stmt() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Stmt::Stmt(Stmt&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }

void Stmt::fail(int rc, const char* what) {
  const char* sql = stmt_ ? sqlite3_sql(stmt_) : "";
  throw SqliteError(sqlite3_extended_errcode(db_) ? sqlite3_extended_errcode(db_) : rc,
                    std::string(what) + " '" + std::string(sql).substr(0, 80) + "': " + errmsg(db_));
}

Stmt& Stmt::bind_text(int i, std::string_view text) {
  int rc = sqlite3_bind_text64(stmt_, i, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) fail(rc, "bind");
  return *this;
}

Stmt& Stmt::bind_blob(int i, std::string_view bytes) {
  // A zero-length blob must still be a BLOB, not NULL (the columns are NOT NULL).
  int rc = bytes.empty() ? sqlite3_bind_zeroblob(stmt_, i, 0)
                         : sqlite3_bind_blob64(stmt_, i, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) fail(rc, "bind");
  return *this;
}

Stmt& Stmt::bind_int(int i, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, i, value);
  if (rc != SQLITE_OK) fail(rc, "bind");
  return *this;
}

Stmt& Stmt::bind_double(int i, double value) {
  int rc = sqlite3_bind_double(stmt_, i, value);
  if (rc != SQLITE_OK) fail(rc, "bind");
  return *this;
}

bool Stmt::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(rc, "step");
}

void Stmt::run() {
  while (step()) {
  }
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Stmt::col_int(int i) { return sqlite3_column_int64(stmt_, i); }
double Stmt::col_double(int i) { return sqlite3_column_double(stmt_, i); }

std::string Stmt::col_text(int i) {
  const unsigned char* p = sqlite3_column_text(stmt_, i);
  int n = sqlite3_column_bytes(stmt_, i);
  return p ? std::string(reinterpret_cast<const char*>(p), n) : std::string();
}

std::string Stmt::col_blob(int i) {
  const void* p = sqlite3_column_blob(stmt_, i);
  int n = sqlite3_column_bytes(stmt_, i);
  if (!p && n == 0 && sqlite3_errcode(db_) == SQLITE_NOMEM) fail(SQLITE_NOMEM, "column");
  return p ? std::string(static_cast<const char*>(p), n) : std::string();
}

// --- Db -----------------------------------------------------------------------

std::unique_ptr<Db> Db::open(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  if (rc != SQLITE_OK) {
    int code = raw ? sqlite3_extended_errcode(raw) : rc;
    std::string msg = "open " + path + ": " + errmsg(raw);
    sqlite3_close_v2(raw);
    throw SqliteError(code ? code : rc, msg);
  }
  sqlite3_extended_result_codes(raw, 1);
  return std::unique_ptr<Db>(new Db(raw));
}

Db::~Db() {
  if (db_) sqlite3_close_v2(db_);
}

void Db::exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = "exec '" + sql.substr(0, 80) + "': " + (err ? err : errmsg(db_));
    sqlite3_free(err);
    throw SqliteError(sqlite3_extended_errcode(db_) ? sqlite3_extended_errcode(db_) : rc, msg);
  }
}

int64_t Db::query_int(std::string_view sql) {
  Stmt s = prepare(sql);
  return s.step() ? s.col_int(0) : 0;
}

std::string Db::query_text(std::string_view sql) {
  Stmt s = prepare(sql);
  return s.step() ? s.col_text(0) : std::string();
}

int64_t Db::changes() const { return sqlite3_changes64(db_); }
void Db::set_busy_timeout(int ms) { sqlite3_busy_timeout(db_, ms); }
bool Db::readonly(const char* schema) const { return sqlite3_db_readonly(db_, schema) == 1; }

void Db::persist_wal() {
  int on = 1;
  sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &on);
}

void Db::skip_checkpoint_on_close() {
  sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
}

// --- Txn ----------------------------------------------------------------------

Txn::Txn(Db& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Txn::~Txn() {
  if (!open_) return;
  try {
    db_.exec("ROLLBACK");
  } catch (const SqliteError&) {
    // Already rolled back by SQLite (e.g. after SQLITE_FULL): nothing to undo.
  }
}

void Txn::commit() {
  db_.exec("COMMIT");
  open_ = false;
}

}  // namespace attnjit::store
