// SPDX-License-Identifier: MIT
// Unit tests of the shared JSON string writer (common/json.hpp) and write-file helper
// (common/write_file.hpp) that libferry, ferry-export, ferry-bench and the probes all use.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unistd.h>

#include "json.hpp"
#include "write_file.hpp"

namespace {

using ferry::detail::append_json_string;
using ferry::detail::json_string;
using namespace std::string_literals;

// Decodes one JSON string literal as RFC 8259 §7 defines it (escapes up to \u00ff, which is all
// the writer emits). Throws std::runtime_error on anything the grammar forbids, including a raw
// control character.
std::string decode_json_string(std::string_view lit) {
  if (lit.size() < 2 || lit.front() != '"' || lit.back() != '"') throw std::runtime_error("not quoted");
  std::string out;
  for (std::size_t i = 1; i + 1 < lit.size(); ++i) {
    const char c = lit[i];
    if (static_cast<unsigned char>(c) < 0x20) throw std::runtime_error("raw control character");
    if (c == '"') throw std::runtime_error("unescaped quotation mark");
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i + 1 >= lit.size()) throw std::runtime_error("escape at the end");
    switch (lit[i]) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        if (i + 5 >= lit.size()) throw std::runtime_error("short \\u escape");
        const std::string hex(lit.substr(i + 1, 4));
        const unsigned long v = std::stoul(hex, nullptr, 16);
        if (v > 0xff) throw std::runtime_error("\\u escape beyond what the writer emits");
        out += static_cast<char>(v);
        i += 4;
        break;
      }
      default: throw std::runtime_error("unknown escape");
    }
  }
  return out;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::filesystem::path temp_file(const char* name) {
  return std::filesystem::temp_directory_path() /
         ("ferry-unit-" + std::to_string(::getpid()) + "-" + name);
}

}  // namespace

TEST_CASE("json_string escapes quotation marks and backslashes") {
  CHECK(json_string("") == R"("")");
  CHECK(json_string("plain") == R"("plain")");
  CHECK(json_string(R"(say "hi")") == R"("say \"hi\"")");
  CHECK(json_string(R"(C:\dir\)") == R"("C:\\dir\\")");
  CHECK(json_string(R"(\")") == R"("\\\"")");
  CHECK(json_string("a/b") == R"("a/b")");  // the solidus may stay raw
}

TEST_CASE("json_string writes every control character as an escape") {
  CHECK(json_string("\b\f\n\r\t") == R"("\b\f\n\r\t")");
  CHECK(json_string("\x01\x1f") == R"("\u0001\u001f")");
  CHECK(json_string("a\0b"s) == R"("a\u0000b")");  // an embedded NUL is kept, escaped
  CHECK(json_string("\x1b[0m") == R"("\u001b[0m")");
  CHECK(json_string("\x7f") == "\"\x7f\"");  // DEL is not a JSON control character
  for (int c = 0; c < 0x20; ++c) {
    CAPTURE(c);
    const std::string lit = json_string(std::string(1, static_cast<char>(c)));
    CHECK(lit.size() > 3);  // escaped, never raw
    CHECK(lit.find_first_of(std::string_view("\0\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"
                                             "\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f",
                                             32)) == std::string::npos);
  }
}

TEST_CASE("json_string passes UTF-8 through unchanged") {
  const std::string utf8 = "gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x9a\xa2 \xe6\xb8\xa1\xe3\x81\x97";  // grüß € 🚢 渡し
  CHECK(json_string(utf8) == "\"" + utf8 + "\"");
  CHECK(json_string("\"\xc3\xa9\"\n") == "\"\\\"\xc3\xa9\\\"\\n\"");
}

TEST_CASE("json_string round-trips every byte through a JSON decoder") {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string lit = json_string(all);
  CHECK(decode_json_string(lit) == all);
  CHECK(decode_json_string(json_string("tag \"<&>\" 3\\n")) == "tag \"<&>\" 3\\n");
}

TEST_CASE("append_json_string appends after what the buffer holds") {
  std::string out = "{\"k\": ";
  append_json_string(out, "v\"");
  out += '}';
  CHECK(out == R"({"k": "v\""})");
}

TEST_CASE("write_file writes the bytes exactly and truncates") {
  const auto path = temp_file("write.bin");
  const std::string bytes = "line\n\0\xff\r\n"s;
  ferry::detail::write_file("test", bytes, path);
  CHECK(slurp(path) == bytes);
  ferry::detail::write_file("test", "x", path);  // shorter: the old tail is gone
  CHECK(slurp(path) == "x");
  ferry::detail::write_file("test", "", path);
  CHECK(slurp(path).empty());
  std::filesystem::remove(path);
}

TEST_CASE("write_file throws backend_error naming the caller and the path") {
  const std::uint_least32_t line = __LINE__ + 2;
  try {
    ferry::detail::write_file("write_thing", "x", "/nonexistent-ferry-dir/f.json");
    FAIL("nothing thrown");
  } catch (const ferry::Error& e) {
    CHECK(e.code() == ferry::ErrorCode::backend_error);
    CHECK(e.message().find("write_thing") != std::string::npos);
    CHECK(e.message().find("/nonexistent-ferry-dir/f.json") != std::string::npos);
    CHECK(e.call() == "std::ofstream");
#if !defined(__clang__) || __clang_major__ >= 17
    CHECK(e.where().line() == line);
#else
    (void)line;
#endif
  }
}

TEST_CASE("write_file reports bytes the device cannot take") {
  // /dev/full opens and accepts buffered writes, then fails with ENOSPC when they reach it:
  // the failure surfaces when the file is closed.
  if (!std::filesystem::exists("/dev/full")) return;
  try {
    ferry::detail::write_file("write_thing", std::string(1 << 16, 'x'), "/dev/full");
    FAIL("nothing thrown");
  } catch (const ferry::Error& e) {
    CHECK(e.code() == ferry::ErrorCode::backend_error);
    CHECK(e.message().find("writing '/dev/full' failed") != std::string::npos);
  }
}
