// SPDX-License-Identifier: MIT
// The CUDA references of a build with CUDA: forwarded to the module ferry-bench-cuda
// (vendor_cuda.cpp), which links the CUDA runtime and is opened here at the first use, so
// ferry-bench links nothing of CUDA. The module is looked for beside the executable (the build
// tree), then where meson installs it. Where it does not load (no libcudart on this machine),
// each reference is reported as not measured, with the loader's reason.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "vendor.hpp"

namespace ferry_bench {
namespace {

struct Module {
  const VendorCudaApi* api = nullptr;
  std::string failure;  ///< why not loaded
};

std::string executable_dir() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  const std::string exe(path, static_cast<std::size_t>(n));
  const std::size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string(".") : exe.substr(0, slash);
}

const Module& module() {
  static const Module m = [] {
    Module r;
    for (const std::string& path : {executable_dir() + "/ferry-bench-cuda.so",
                                    std::string(FERRY_BENCH_MODULE_DIR) + "/ferry-bench-cuda.so"}) {
      void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) {
        const char* why = dlerror();
        r.failure += (r.failure.empty() ? "" : "; ") + std::string(why != nullptr ? why : path);
        continue;
      }
      using Entry = const VendorCudaApi* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(lib, "ferry_bench_cuda_api"));
      if (entry != nullptr) {
        r.api = entry();
        r.failure.clear();
        return r;
      }
      r.failure += (r.failure.empty() ? "" : "; ") + path + " has no ferry_bench_cuda_api";
    }
    r.failure = "CUDA references not measured: ferry-bench-cuda.so did not load (" + r.failure + ")";
    return r;
  }();
  return m;
}

}  // namespace

VendorCopy measure_vendor_copy(std::uint64_t bytes, int iterations) {
  if (module().api == nullptr) return {};
  return module().api->measure_vendor_copy(bytes, iterations);
}

VendorCallCost measure_vendor_call_cost(std::uint64_t bytes, int calls, int round) {
  if (module().api == nullptr) return {};
  return module().api->measure_vendor_call_cost(bytes, calls, round);
}

std::unique_ptr<VendorImage> make_cuda_image(const ferry::Device& device, const ferry::ImageDesc& desc) {
  if (module().api == nullptr) {
    auto image = std::make_unique<VendorImage>();
    image->skipped = module().failure;
    return image;
  }
  return module().api->make_cuda_image(device, desc);
}

VendorImageCopy measure_cuda_image_copy(const ferry::Device& device, const VendorImage& image,
                                        const ferry::ImageDesc& desc, std::span<const ferry::ImageRegion> regions,
                                        std::uint64_t bytes, int reps) {
  if (module().api == nullptr) {
    VendorImageCopy r;
    r.skipped = module().failure;
    return r;
  }
  return module().api->measure_cuda_image_copy(device, image, desc, regions, bytes, reps);
}

VendorContention measure_cuda_contention(const ferry::Device& device, const ContentionConfig& config) {
  if (module().api == nullptr) {
    VendorContention r;
    r.skipped = module().failure;
    return r;
  }
  return module().api->measure_cuda_contention(device, config);
}

}  // namespace ferry_bench
