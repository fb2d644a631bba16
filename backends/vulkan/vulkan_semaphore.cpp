// SPDX-License-Identifier: MIT
// Vulkan timeline semaphores: own, exported as an opaque fd (interop), host value, signal
// and wait, and the device's retirement of semaphores that queued work still names.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "vulkan_internal.hpp"

namespace ferry::detail {

namespace {

// Notes a host signal in the device's counter while it is in progress (see kSignalBehindWait).
class HostSignalInProgress {
 public:
  /// How long an ended signal stays on record: two of the layer's 10 s waits.
  static constexpr auto kKeepEnded = std::chrono::seconds(20);

  explicit HostSignalInProgress(ValidationCounter& counter)
      : counter_(counter.signal_behind_wait.load() ? &counter : nullptr) {
    if (counter_ == nullptr) return;
    std::lock_guard lock(counter_->signals_mutex);
    counter_->signals_started.push_back(started_);
  }
  ~HostSignalInProgress() {
    if (counter_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(counter_->signals_mutex);
    auto& started = counter_->signals_started;
    started.erase(std::find(started.begin(), started.end(), started_));
    auto& ended = counter_->signals_ended;
    std::erase_if(ended, [&](const auto& span) { return now - span.second > kKeepEnded; });
    ended.emplace_back(started_, now);
  }
  HostSignalInProgress(const HostSignalInProgress&) = delete;
  HostSignalInProgress& operator=(const HostSignalInProgress&) = delete;

 private:
  ValidationCounter* counter_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace

VkSemaphore VulkanDevice::create_timeline(std::uint64_t initial, const void* next) {
  VkSemaphoreTypeCreateInfo type{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, next};
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = initial;
  VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type};
  VkSemaphore semaphore = VK_NULL_HANDLE;
  FERRY_VK_CHECK(vk_.vkCreateSemaphore(device_, &info, nullptr, &semaphore));
  return semaphore;
}

void VulkanDevice::retire_semaphore(VkSemaphore semaphore) {
  std::lock_guard lock(mutex_);
  retired_.push_back(semaphore);
}

std::unique_ptr<BackendSemaphore> VulkanDevice::create_semaphore(std::uint64_t initial) {
  return std::make_unique<VulkanSemaphore>(*this, initial);
}

VulkanSemaphore::VulkanSemaphore(VulkanDevice& device, std::uint64_t initial)
    : device_(device), semaphore_(device.create_timeline(initial)) {}

VulkanSemaphore::VulkanSemaphore(VulkanDevice& device, VkSemaphore semaphore)
    : device_(device), semaphore_(semaphore) {}

std::unique_ptr<BackendSemaphore> VulkanDevice::create_exported_semaphore(std::uint64_t initial, int* fd) {
  if (!fd_export_) {
    vk_fail(ErrorCode::unsupported, caps_.name + ": timeline semaphores cannot be exported as opaque fds "
                                                 "(VK_KHR_external_semaphore_fd missing or not exportable)");
  }
  VkExportSemaphoreCreateInfo exported{VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO};
  exported.handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  auto semaphore = std::make_unique<VulkanSemaphore>(*this, create_timeline(initial, &exported));
  VkSemaphoreGetFdInfoKHR info{VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR};
  info.semaphore = semaphore->handle();
  info.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  FERRY_VK_CHECK(vk_.vkGetSemaphoreFdKHR(device_, &info, fd));
  return semaphore;
}

VulkanSemaphore::~VulkanSemaphore() {
  if (queued_.load(std::memory_order_relaxed)) {
    device_.retire_semaphore(semaphore_);
  } else {
    device_.vk().vkDestroySemaphore(device_.handle(), semaphore_, nullptr);
  }
}

std::uint64_t VulkanSemaphore::value() {
  std::uint64_t v = 0;
  FERRY_VK_CHECK(device_.vk().vkGetSemaphoreCounterValue(device_.handle(), semaphore_, &v));
  return v;
}

void VulkanSemaphore::signal(std::uint64_t value) {
  VkSemaphoreSignalInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO};
  info.semaphore = semaphore_;
  info.value = value;
  const HostSignalInProgress in_progress(device_.validation());
  FERRY_VK_CHECK(device_.vk().vkSignalSemaphore(device_.handle(), &info));
}

bool VulkanSemaphore::wait(std::uint64_t value, std::chrono::nanoseconds timeout) {
  VkSemaphoreWaitInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  info.semaphoreCount = 1;
  info.pSemaphores = &semaphore_;
  info.pValues = &value;
  const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(timeout.count(), 0));
  const VkResult result = device_.vk().vkWaitSemaphores(device_.handle(), &info, ns);
  if (result == VK_TIMEOUT) return false;
  FERRY_VK_CHECK(result);
  return true;
}

}  // namespace ferry::detail
