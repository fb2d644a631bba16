// SPDX-License-Identifier: MIT
// The write-file helper of libferry, ferry-export and the tools (internal, header-only, not
// installed): every file ferry writes goes through it, so a failed write is reported one way,
// as the typed ferry::Error every other ferry failure is.
//
// It lives in common/, the folder of header-only helpers that hold no ferry state and need
// nothing beyond the public headers: libferry, ferry-export, the tools and the unit tests all
// have common/ on their include path, while ferry-export and ferry-bench see no more of
// libferry than its public API (src/ is not on their path).
#pragma once

#include <filesystem>
#include <fstream>
#include <ios>
#include <source_location>
#include <string>
#include <string_view>

#include "ferry/error.hpp"

namespace ferry::detail {

/// Writes `bytes` to `path` exactly (binary; the file is created or truncated). Throws
/// `Error(backend_error)` whose message names `function` (the public caller, such as
/// "write_json") and the path, carrying the caller's location `where`, when the file cannot
/// be opened or the bytes cannot all be written and closed.
inline void write_file(std::string_view function, std::string_view bytes, const std::filesystem::path& path,
                       const std::source_location& where = std::source_location::current()) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    throw Error(ErrorCode::backend_error,
                std::string(function) + ": cannot open '" + path.string() + "' for writing", "std::ofstream", where);
  }
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  // Closing flushes; a full disk shows up here, not at write().
  f.close();
  if (!f) {
    throw Error(ErrorCode::backend_error, std::string(function) + ": writing '" + path.string() + "' failed",
                "std::ofstream::write", where);
  }
}

}  // namespace ferry::detail
