// SPDX-License-Identifier: MIT
// The JSON string writer of libferry, ferry-export and the tools (internal, header-only, not
// installed): every JSON text ferry writes quotes its strings here, so they all escape alike.
//
// A string becomes a JSON string literal (RFC 8259 §7): the quotation mark and the reverse
// solidus are escaped, control characters U+0000..U+001F become \b \f \n \r \t or \u00XX (the
// grammar forbids them raw), and every other byte is copied unchanged, so UTF-8 text passes
// through readable. Bytes are not validated as UTF-8: callers hand in UTF-8 (tags, names).
//
// It lives in common/, the folder of header-only helpers that hold no ferry state and need
// nothing beyond the public headers: libferry, ferry-export, the tools and the unit tests all
// have common/ on their include path, while ferry-export and ferry-bench see no more of
// libferry than its public API (src/ is not on their path).
#pragma once

#include <string>
#include <string_view>

namespace ferry::detail {

/// Appends `text` to `out` as a JSON string literal, quotation marks included.
inline void append_json_string(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20) {
          out += "\\u00";
          out += hex[byte >> 4];
          out += hex[byte & 0xf];
        } else {
          out += c;
        }
      }
    }
  }
  out += '"';
}

/// `text` as a JSON string literal, quotation marks included.
[[nodiscard]] inline std::string json_string(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  append_json_string(out, text);
  return out;
}

}  // namespace ferry::detail
