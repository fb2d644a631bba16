// SPDX-License-Identifier: MIT
// The conformance suite on the host (CPU reference) backend. Also run as
// conformance-host-latency with FERRY_HOST_LATENCY_US=200: every queued operation is delayed
// by a random amount, so a missing wait shows up as wrong data.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "conformance.hpp"

int main(int argc, char** argv) {
  const ferry::Backend backend = ferry::Backend::host;
  if (int skip = conformance::presence_check(backend)) return skip;
  conformance::configure({.backend = backend, .validation = false});
  const char* latency = std::getenv("FERRY_HOST_LATENCY_US");
  std::printf("conformance: host backend, latency injection %s us\n",
              latency != nullptr ? latency : "0");
  return conformance::run(argc, argv);
}
