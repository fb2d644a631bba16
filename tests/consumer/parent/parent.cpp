// SPDX-License-Identifier: MIT
// The parent project's own program (tests/consumer/parent/meson.build).
#include <ferry/ferry.hpp>

int main() { return ferry::Device::built_with(ferry::Backend::host) ? 0 : 1; }
