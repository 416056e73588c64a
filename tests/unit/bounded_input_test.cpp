// util/bounded_input: size, depth and file-type limits, duplicate keys, and
// quoting input into messages (escaped, at most ~200 characters).
#include "util/bounded_input.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "attnjit/error.hpp"
#include "common/temp_dir.hpp"

namespace attnjit::util {
namespace {

// The message of the Error that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(BoundedInput, QuoteInputEscapesAndTruncates) {
  EXPECT_EQ(quote_input("abc"), "abc");
  EXPECT_EQ(quote_input(std::string("a\0b\x1b[2J\n", 8)), "a\\x00b\\x1b[2J\\n");
  const std::string q = quote_input(std::string(5000, 'x'));
  EXPECT_EQ(q, std::string(kMaxQuotedChars, 'x') + "... (5000 bytes)");
  // A UTF-8 sequence is not cut in two.
  EXPECT_EQ(quote_input("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9... (4 bytes)");
  EXPECT_EQ(escape_controls("line\nnext\x1b"), "line\nnext\\x1b");
}

TEST(BoundedInput, BareMessageDropsThePrefix) {
  EXPECT_EQ(bare_message(Error(ErrorCode::kStore, "x: y")), "x: y");
  EXPECT_EQ(bare_message(std::runtime_error("plain")), "plain");
}

TEST(BoundedInput, ParsesOrdinaryJson) {
  const auto j = parse_json_bounded(R"({"a": [1, {"b": "c\nd"}], "e": null})", "t");
  EXPECT_EQ(j["a"][1]["b"], "c\nd");
  EXPECT_EQ(parse_json_bounded("// note\n{\"a\": 1}", "t", /*allow_comments=*/true)["a"], 1);
  // The same key in two objects is no duplicate.
  EXPECT_EQ(parse_json_bounded(R"([{"a": 1}, {"a": 2}])", "t").size(), 2u);
}

TEST(BoundedInput, DepthIsLimitedWithoutRecursion) {
  const auto deep = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_NO_THROW(parse_json_bounded(deep(kMaxJsonDepth), "t"));
  EXPECT_NE(error_of([&] { parse_json_bounded(deep(kMaxJsonDepth + 1), "t"); }).find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_json_bounded(deep(400000), "t"); }).find("nested deeper"), std::string::npos);
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  EXPECT_NE(error_of([&] { parse_json_bounded(objects, "t"); }).find("nested deeper"), std::string::npos);
}

TEST(BoundedInput, SizeDuplicatesAndControlCharactersAreErrors) {
  EXPECT_NE(error_of([] { parse_json_bounded(std::string(kMaxJsonBytes + 1, ' '), "spec"); }).find("over the limit"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json_bounded(R"({"a": {"b": 1, "b": 2}})", "spec"); }).find("duplicate key \"b\""),
            std::string::npos);
  const std::string nul = error_of([] { parse_json_bounded(R"({"a": "x\u0000\u001b"})", "spec"); });
  EXPECT_NE(nul.find("control character"), std::string::npos) << nul;
  EXPECT_NE(nul.find("x\\x00\\x1b"), std::string::npos) << nul;
  const std::string key = error_of([] { parse_json_bounded(R"({"\u0007": 1})", "spec"); });
  EXPECT_NE(key.find("key \"\\x07\""), std::string::npos) << key;
  // A parse error quotes at most a few hundred characters of a huge token.
  const std::string bad = error_of([] { parse_json_bounded("[\"" + std::string(500000, 'q'), "spec"); });
  EXPECT_EQ(bad.rfind("attnjit: invalid argument: spec: not valid JSON at byte", 0), 0u) << bad.substr(0, 500);
  EXPECT_LT(bad.size(), 500u);
}

TEST(BoundedInput, NumberOutOfRangeIsAnErrorNotACrash) {
  // nlohmann throws out_of_range, not parse_error, for a number past double's range
  // (fuzz_spec_json found it escaping as an uncaught exception).
  const std::string e = error_of([] { parse_json_bounded(R"({"page_size": 3e990})", "spec"); });
  EXPECT_EQ(e.rfind("attnjit: invalid argument: spec: not valid JSON", 0), 0u) << e;
}

TEST(BoundedInput, ReadsOnlyRegularFilesWithinTheLimit) {
  testing::TempDir dir("bounded-input");
  std::ofstream(dir.sub("ok.json")) << "{}";
  EXPECT_EQ(read_regular_file(dir.sub("ok.json"), "spec file"), "{}");
  std::ofstream(dir.sub("big.json")) << std::string(100, 'x');
  EXPECT_NE(error_of([&] { read_regular_file(dir.sub("big.json"), "spec file", 99); }).find("over the limit"),
            std::string::npos);
  std::filesystem::create_symlink("/dev/zero", dir.sub("zero.json"));
  EXPECT_NE(error_of([&] { read_regular_file(dir.sub("zero.json"), "spec file"); }).find("is a character device"),
            std::string::npos);
  ASSERT_EQ(mkfifo(dir.sub("fifo").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { read_regular_file(dir.sub("fifo"), "spec file"); }).find("is a FIFO"), std::string::npos);
  EXPECT_NE(error_of([&] { read_regular_file(dir.path(), "config"); }).find("config '" + dir.path() + "': is a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_regular_file(dir.sub("none"), "config"); }).find("no such file"), std::string::npos);
}

}  // namespace
}  // namespace attnjit::util
