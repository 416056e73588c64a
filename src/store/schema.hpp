// The cache_schema/NNN_*.sql migrations, embedded at build time, in order.
#pragma once

#include <string>
#include <vector>

namespace attnjit::store {

struct Migration {
  const char* file;  // "001_initial.sql": its number is the user_version it sets
  const char* sql;
};

const std::vector<Migration>& schema_migrations();

}  // namespace attnjit::store
