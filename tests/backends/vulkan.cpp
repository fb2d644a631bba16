// SPDX-License-Identifier: MIT
// The conformance suite on the Vulkan backend, run under VK_LAYER_KHRONOS_validation with
// synchronization validation (meson sets VK_INSTANCE_LAYERS / VK_LAYER_ENABLES). Every case
// fails if the device it opened saw any validation message.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <vulkan/vulkan.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "conformance.hpp"

using namespace ferry;

CONFORMANCE_CASE("vulkan: capabilities describe the queue families") {
  Device dev = conformance::open_device();
  const Capabilities& caps = dev.capabilities();
  CHECK(caps.backend == Backend::vulkan);
  CHECK_FALSE(caps.name.empty());
  CHECK(caps.min_alignment > 0);
  if (caps.separate_queue_families) CHECK(caps.dedicated_transfer_queue);
  if (!caps.separate_queue_families) CHECK_FALSE(caps.ownership_transfer);
  const std::string kind = caps.is_gpu ? " (GPU)" : " (CPU driver)";
  const std::string families =
      caps.separate_queue_families ? "separate transfer family" : "one queue family";
  MESSAGE(caps.name << kind << ": " << families << "; " << caps.notes);
  CHECK(dev.queue(QueueRole::compute).role() == QueueRole::compute);
  CHECK(dev.queue(QueueRole::transfer).role() == QueueRole::transfer);
}

CONFORMANCE_CASE("vulkan: adopting a queue of a family out of range is invalid_argument") {
  Device dev = conformance::open_device();
  NativeQueue bad;
  int not_a_queue = 0;
  bad.handle = &not_a_queue;
  bad.family = 9999;
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_queue(QueueRole::compute, bad); },
                            "adopt_queue(family 9999)");
  NativeQueue null_queue;
  conformance::expect_error(ErrorCode::invalid_argument,
                            [&] { (void)dev.adopt_queue(QueueRole::compute, null_queue); },
                            "adopt_queue(null VkQueue)");
}

namespace {

/// Whether the Vulkan loader can see VK_LAYER_KHRONOS_validation (asked through the loader
/// itself, so every layer search path counts).
bool validation_layer_present() {
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  auto enumerate = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
      dlsym(lib, "vkEnumerateInstanceLayerProperties"));
  bool found = false;
  std::uint32_t count = 0;
  if (enumerate != nullptr && enumerate(&count, nullptr) == VK_SUCCESS) {
    std::vector<VkLayerProperties> layers(count);
    if (enumerate(&count, layers.data()) == VK_SUCCESS) {
      for (const VkLayerProperties& l : layers) {
        found = found || std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0;
      }
    }
  }
  dlclose(lib);
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  const Backend backend = Backend::vulkan;
  if (int skip = conformance::presence_check(backend)) return skip;
  // The suite's claim is "clean under validation": without the layer it proves nothing.
  if (!validation_layer_present()) {
    std::printf("FAILED: vulkan: VK_LAYER_KHRONOS_validation is not installed "
                "(Debian: apt-get install vulkan-validationlayers)\n");
    return 1;
  }
  conformance::configure({.backend = backend, .validation = true});
  // Any validation message seen by a device fails the case that opened it.
  conformance::set_end_of_case_check([](Device& dev) {
    const std::uint64_t before_close = dev.validation_messages();
    CHECK_MESSAGE(before_close == 0, before_close << " Vulkan validation messages (see stderr)");
    dev.close();
    try {
      const std::uint64_t after_close = dev.validation_messages();
      CHECK_MESSAGE(after_close == before_close,
                    (after_close - before_close) << " Vulkan validation messages during close");
    } catch (const Error&) {
      // the count is not readable once the device is closed
    }
  });
  const char* layers = std::getenv("VK_INSTANCE_LAYERS");
  std::printf("conformance: vulkan, VK_INSTANCE_LAYERS=%s\n", layers != nullptr ? layers : "");
  return conformance::run(argc, argv);
}
