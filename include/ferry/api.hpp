// SPDX-License-Identifier: MIT
/// @file api.hpp
/// @brief The export macros of ferry's libraries: what a consumer may link against.
///
/// libferry, ferry-export and ferry-testkit are built with symbols hidden by default (meson's
/// `gnu_symbol_visibility: 'hidden'`): a function or class is part of a library's binary
/// interface only when its declaration in a public header carries that library's macro.
///  - `FERRY_API`: libferry (`device.hpp`, `pool.hpp`, `transfer.hpp`, `snapshot.hpp`,
///    `interop.hpp`, `vulkan.hpp`, `error.hpp`);
///  - `FERRY_EXPORT_API`: ferry-export (`export.hpp`);
///  - `FERRY_TESTKIT_API`: ferry-testkit (`testing.hpp`).
///
/// Rule: every class and free function of a public header that the library defines out of
/// line carries the macro; a class carries it on the class (which exports its members, its
/// vtable and its typeinfo, so exceptions and dynamic casts work across libraries). Nothing
/// of `ferry::detail` carries it except the entries that `tests/symbols/` allowlists, each
/// with its reason. Macros only: this header declares nothing and may be included anywhere.
///
/// On ELF and Mach-O the macros set default visibility. On Windows they are
/// `__declspec(dllexport)` while the library itself is compiled (its build defines
/// `FERRY_BUILDING_<LIBRARY>`) and `__declspec(dllimport)` for its consumers; a consumer of a
/// static build defines `FERRY_STATIC`, which makes them empty.
#pragma once

#if defined(_WIN32) || defined(__CYGWIN__)
#if defined(FERRY_STATIC)
#define FERRY_API
#define FERRY_EXPORT_API
#define FERRY_TESTKIT_API
#else
#if defined(FERRY_BUILDING_FERRY)
#define FERRY_API __declspec(dllexport)
#else
#define FERRY_API __declspec(dllimport)
#endif
#if defined(FERRY_BUILDING_EXPORT)
#define FERRY_EXPORT_API __declspec(dllexport)
#else
#define FERRY_EXPORT_API __declspec(dllimport)
#endif
#if defined(FERRY_BUILDING_TESTKIT)
#define FERRY_TESTKIT_API __declspec(dllexport)
#else
#define FERRY_TESTKIT_API __declspec(dllimport)
#endif
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define FERRY_API __attribute__((visibility("default")))
#define FERRY_EXPORT_API __attribute__((visibility("default")))
#define FERRY_TESTKIT_API __attribute__((visibility("default")))
#else
#define FERRY_API
#define FERRY_EXPORT_API
#define FERRY_TESTKIT_API
#endif
