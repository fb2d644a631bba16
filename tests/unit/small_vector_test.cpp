// SPDX-License-Identifier: MIT
// The hot paths' inline scratch list (src/small_vector.hpp).
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "small_vector.hpp"

using ferry::detail::SmallVector;

TEST_CASE("SmallVector keeps order and values across the move onto the heap") {
  SmallVector<std::string, 3> v;
  CHECK(v.empty());
  for (int i = 0; i < 10; ++i) {
    std::string& added = v.push_back("value " + std::to_string(i));
    CHECK(added == "value " + std::to_string(i));  // the reference is to the stored element
    REQUIRE(v.size() == static_cast<std::size_t>(i + 1));
    int expect = 0;
    for (const std::string& s : v) CHECK(s == "value " + std::to_string(expect++));
    CHECK(expect == i + 1);
  }
  CHECK(v.front() == "value 0");
  CHECK(v.back() == "value 9");
  v[4] = "changed";
  CHECK(v[4] == "changed");
}

TEST_CASE("SmallVector releases what it holds") {
  auto shared = std::make_shared<int>(7);
  {
    SmallVector<std::shared_ptr<int>, 2> v;
    for (int i = 0; i < 5; ++i) v.push_back(shared);
    CHECK(shared.use_count() == 6);
  }
  CHECK(shared.use_count() == 1);
}
