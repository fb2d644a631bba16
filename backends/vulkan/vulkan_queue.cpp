// SPDX-License-Identifier: MIT
// Vulkan queue: batches of recorded commands, submission with timeline waits and signals,
// buffer copies, queue-family ownership transfers, the synthetic compute kernel, and the
// device's queues (default, created, adopted). Image copies are in vulkan_image.cpp.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "vulkan_internal.hpp"

namespace ferry::detail {

namespace {

constexpr VkPipelineStageFlags kAllCommands = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;

}  // namespace

VulkanQueue::VulkanQueue(VulkanDevice& device, VkQueue queue, std::uint32_t family,
                         std::uint32_t index, bool owns_index)
    : BackendQueue(kTraits), device_(device), queue_(queue), family_(family), index_(index), owns_index_(owns_index) {
  VkCommandPoolCreateInfo info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT | VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  info.queueFamilyIndex = family;
  FERRY_VK_CHECK(device.vk().vkCreateCommandPool(device.handle(), &info, nullptr, &pool_));
  try {
    progress_ = device.create_timeline(0);
  } catch (...) {
    device.vk().vkDestroyCommandPool(device.handle(), pool_, nullptr);
    throw;
  }
}

VulkanQueue::~VulkanQueue() {
  const auto& vk = device_.vk();
  const VkDevice dev = device_.handle();
  // Work recorded but not flushed still carries signals that someone may wait for.
  try {
    flush();
  } catch (const Error& err) {
    std::fprintf(stderr, "ferry: Vulkan queue teardown: submitting the recorded work failed: %s\n",
                 err.what());
  }
  // Submitted batches must complete before their command buffers are freed.
  if (submitted_ > 0) {
    VkSemaphoreWaitInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    info.semaphoreCount = 1;
    info.pSemaphores = &progress_;
    info.pValues = &submitted_;
    const VkResult result = vk.vkWaitSemaphores(dev, &info, UINT64_MAX);
    if (result != VK_SUCCESS) {
      std::fprintf(stderr, "ferry: Vulkan queue teardown: vkWaitSemaphores: %s\n", vk_describe(result).c_str());
    }
  }
  if (recording_) idle_.push_back(current_);  // only after a failed flush
  for (std::size_t i = 0; i < closed_count_; ++i) idle_.push_back(closed_[i].batch);
  for (const auto* list : {&idle_, &in_flight_}) {
    for (const Batch& b : *list) vk.vkDestroyDescriptorPool(dev, b.descriptors, nullptr);
  }
  vk.vkDestroyCommandPool(dev, pool_, nullptr);  // frees the command buffers
  vk.vkDestroySemaphore(dev, progress_, nullptr);
  if (owns_index_) device_.release_queue_index(family_, index_);
}

// The batch being recorded, begun on a recycled command buffer if none is.
VulkanQueue::Batch& VulkanQueue::recording() {
  if (recording_) return current_;
  const auto& vk = device_.vk();
  const VkDevice dev = device_.handle();
  if (idle_.empty() && !in_flight_.empty()) {
    std::uint64_t completed = 0;
    FERRY_VK_CHECK(vk.vkGetSemaphoreCounterValue(dev, progress_, &completed));
    for (std::size_t i = 0; i < in_flight_.size();) {
      if (in_flight_[i].done <= completed) {
        idle_.push_back(in_flight_[i]);
        in_flight_[i] = in_flight_.back();
        in_flight_.pop_back();
      } else {
        ++i;
      }
    }
  }
  if (idle_.empty()) {
    Batch fresh;
    VkCommandBufferAllocateInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    info.commandPool = pool_;
    info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    info.commandBufferCount = 1;
    FERRY_VK_CHECK(vk.vkAllocateCommandBuffers(dev, &info, &fresh.commands));
    idle_.push_back(fresh);
  }
  Batch& b = idle_.back();
  if (b.sets_used != 0) {
    FERRY_VK_CHECK(vk.vkResetDescriptorPool(dev, b.descriptors, 0));
    b.sets_used = 0;
  }
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  FERRY_VK_CHECK(vk.vkBeginCommandBuffer(b.commands, &begin));  // implicitly resets it
  current_ = b;
  idle_.pop_back();
  recording_ = true;
  batch_empty_ = true;
  writes_host_ = false;
  accesses_.clear();
  return current_;
}

// Records a memory barrier before a command touching `next` when needed (see the class
// comment). Its destination access is only what the commands recorded here do (transfer and
// shader reads and writes): MEMORY_READ would also invalidate caches for reads ferry never
// makes, and NVIDIA's driver then delays the next command by tens of microseconds, on the
// critical path of a copy handed to compute.
void VulkanQueue::order(std::initializer_list<Access> next) {
  recording();
  bool barrier = batch_empty_ || accesses_.size() + next.size() > kMaxTrackedAccesses;
  for (const Access& a : next) {
    for (const Access& b : accesses_) {
      barrier = barrier || (a.buffer == b.buffer && a.begin < b.end && b.begin < a.end && (a.write || b.write));
    }
  }
  if (barrier) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    if (device_.has_compute(family_)) mb.dstAccessMask |= VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    device_.vk().vkCmdPipelineBarrier(current_.commands, kAllCommands, kAllCommands, 0, 1, &mb, 0,
                                      nullptr, 0, nullptr);
    accesses_.clear();
  }
  accesses_.insert(accesses_.end(), next.begin(), next.end());
  batch_empty_ = false;
}

void VulkanQueue::close() {
  if (!recording_ && open_.signals.empty()) return;
  const auto& vk = device_.vk();
  if (recording_) {
    if (writes_host_) {  // device writes to host memory become visible to host reads
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
      vk.vkCmdPipelineBarrier(current_.commands, kAllCommands, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0,
                              nullptr, 0, nullptr);
    }
    const VkResult ended = vk.vkEndCommandBuffer(current_.commands);
    if (ended != VK_SUCCESS) {
      // The batch's commands are lost with the failure; keep the queue consistent.
      idle_.push_back(current_);
      recording_ = false;
      open_.signals.clear();
      FERRY_VK_CHECK(ended);
    }
  }
  if (closed_count_ == closed_.size()) closed_.emplace_back();
  Submission& next = closed_[closed_count_++];
  next.waits.swap(open_.waits);
  next.signals.swap(open_.signals);
  open_.waits.clear();
  open_.signals.clear();
  next.has_batch = recording_;
  if (recording_) next.batch = current_;
  recording_ = false;
}

// All closed submissions in one vkQueueSubmit2 (or vkQueueSubmit) call, each signalling this
// queue's progress timeline for its batch's recycling. All of one device's submissions are
// serialized (NVIDIA's driver has failed under concurrent vkQueueSubmit on two queues).
void VulkanQueue::submit_closed() {
  if (closed_count_ == 0) return;
  const auto& vk = device_.vk();
  const std::size_t n = closed_count_;
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += closed_[i].waits.size() + closed_[i].signals.size() + 1;
  try {
    sems_.clear();
    values_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const Submission& sub = closed_[i];
      for (const auto& [s, v] : sub.waits) {
        sems_.push_back(s);
        values_.push_back(v);
      }
      for (const auto& [s, v] : sub.signals) {
        sems_.push_back(s);
        values_.push_back(v);
      }
      sems_.push_back(progress_);
      values_.push_back(submitted_ + i + 1);
    }
    if (vk.vkQueueSubmit2 != nullptr) {
      infos_.resize(total);
      commands_.resize(n);
      submits2_.resize(n);
      std::size_t at = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const Submission& sub = closed_[i];
        const std::size_t waits = sub.waits.size(), signals = sub.signals.size() + 1;
        for (std::size_t k = at; k < at + waits + signals; ++k) {
          infos_[k] = VkSemaphoreSubmitInfo{VK_STRUCTURE_TYPE_SEMAPHORE_SUBMIT_INFO};
          infos_[k].semaphore = sems_[k];
          infos_[k].value = values_[k];
          infos_[k].stageMask = VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT;
        }
        commands_[i] = VkCommandBufferSubmitInfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_SUBMIT_INFO};
        commands_[i].commandBuffer = sub.batch.commands;
        VkSubmitInfo2& info = submits2_[i];
        info = VkSubmitInfo2{VK_STRUCTURE_TYPE_SUBMIT_INFO_2};
        info.waitSemaphoreInfoCount = static_cast<std::uint32_t>(waits);
        info.pWaitSemaphoreInfos = infos_.data() + at;
        info.commandBufferInfoCount = sub.has_batch ? 1 : 0;
        info.pCommandBufferInfos = &commands_[i];
        info.signalSemaphoreInfoCount = static_cast<std::uint32_t>(signals);
        info.pSignalSemaphoreInfos = infos_.data() + at + waits;
        at += waits + signals;
      }
      std::lock_guard lock(device_.submit_mutex());
      FERRY_VK_CHECK(vk.vkQueueSubmit2(queue_, static_cast<std::uint32_t>(n), submits2_.data(), VK_NULL_HANDLE));
    } else {
      stages_.assign(total, kAllCommands);
      timelines_.resize(n);
      submits_.resize(n);
      buffers_.resize(n);
      std::size_t at = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const Submission& sub = closed_[i];
        const auto waits = static_cast<std::uint32_t>(sub.waits.size());
        const auto signals = static_cast<std::uint32_t>(sub.signals.size() + 1);
        buffers_[i] = sub.batch.commands;
        VkTimelineSemaphoreSubmitInfo& timeline = timelines_[i];
        timeline = VkTimelineSemaphoreSubmitInfo{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
        timeline.waitSemaphoreValueCount = waits;
        timeline.pWaitSemaphoreValues = values_.data() + at;
        timeline.signalSemaphoreValueCount = signals;
        timeline.pSignalSemaphoreValues = values_.data() + at + waits;
        VkSubmitInfo& info = submits_[i];
        info = VkSubmitInfo{VK_STRUCTURE_TYPE_SUBMIT_INFO, &timeline};
        info.waitSemaphoreCount = waits;
        info.pWaitSemaphores = sems_.data() + at;
        info.pWaitDstStageMask = stages_.data() + at;
        info.commandBufferCount = sub.has_batch ? 1 : 0;
        info.pCommandBuffers = &buffers_[i];
        info.signalSemaphoreCount = signals;
        info.pSignalSemaphores = sems_.data() + at + waits;
        at += waits + signals;
      }
      std::lock_guard lock(device_.submit_mutex());
      FERRY_VK_CHECK(vk.vkQueueSubmit(queue_, static_cast<std::uint32_t>(n), submits_.data(), VK_NULL_HANDLE));
    }
  } catch (...) {
    // The submissions are lost with the failure (typically device loss); keep the queue
    // consistent: their command buffers are recycled, nothing counts as submitted.
    for (std::size_t i = 0; i < n; ++i) {
      if (closed_[i].has_batch) idle_.push_back(closed_[i].batch);
    }
    closed_count_ = 0;
    throw;
  }
  driver_submits_.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) {
    if (closed_[i].has_batch) {
      closed_[i].batch.done = submitted_ + i + 1;
      in_flight_.push_back(closed_[i].batch);
    }
  }
  submitted_ += n;
  closed_count_ = 0;
}

void VulkanQueue::copy(VkBuffer dst, VkDeviceSize dst_offset, VkBuffer src, VkDeviceSize src_offset,
                       VkDeviceSize bytes, bool dst_is_host) {
  std::lock_guard lock(mutex_);
  order({{src, src_offset, src_offset + bytes, false}, {dst, dst_offset, dst_offset + bytes, true}});
  const VkBufferCopy region{src_offset, dst_offset, bytes};
  device_.vk().vkCmdCopyBuffer(current_.commands, src, dst, 1, &region);
  writes_host_ = writes_host_ || dst_is_host;
}

void VulkanQueue::copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) {
  copy(buffer_of(dst.segment), dst.offset, buffer_of(src.memory), src.offset, bytes, false);
}

void VulkanQueue::copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) {
  copy(buffer_of(dst.memory), dst.offset, buffer_of(src.segment), src.offset, bytes, true);
}

void VulkanQueue::copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) {
  copy(buffer_of(dst.segment), dst.offset, buffer_of(src.segment), src.offset, bytes, false);
}

void VulkanQueue::signal(BackendSemaphore& sem, std::uint64_t value) {
  auto& s = static_cast<VulkanSemaphore&>(sem);
  std::lock_guard lock(mutex_);
  s.mark_queued();
  bool merged = false;
  for (auto& [handle, v] : open_.signals) {
    if (handle == s.handle()) {  // front end: values of one semaphore only grow
      v = std::max(v, value);
      merged = true;
    }
  }
  if (!merged) open_.signals.emplace_back(s.handle(), value);
  if (!hold_) {
    close();
    submit_closed();
  }
}

void VulkanQueue::hold_signals(bool held) {
  std::lock_guard lock(mutex_);
  hold_ = held;
}

void VulkanQueue::wait(BackendSemaphore& sem, std::uint64_t value) {
  auto& s = static_cast<VulkanSemaphore&>(sem);
  std::lock_guard lock(mutex_);
  s.mark_queued();
  close();  // a wait covers a whole submission: what was recorded before it goes first
  open_.waits.emplace_back(s.handle(), value);
}

void VulkanQueue::flush() {
  std::lock_guard lock(mutex_);
  close();
  submit_closed();
  // Pending waits without commands stay open: they attach to the next submission.
}

// Queue-family ownership transfer of an EXCLUSIVE buffer range (Vulkan spec "Queue Family
// Ownership Transfer"): the release on the source queue and the acquire on the destination
// queue are the same barrier; a semaphore signal/wait pair must order them, which the front
// end's protocol provides. Stage masks are ALL_COMMANDS on both sides so the barrier chains
// with the ALL_COMMANDS semaphore waits and signals.
static_assert(kExternalQueueFamily == VK_QUEUE_FAMILY_EXTERNAL);

void VulkanQueue::ownership_barrier(DeviceRef range, std::uint64_t bytes, std::uint32_t src_family,
                                    std::uint32_t dst_family, bool release) {
  if (!device_.needs_ownership_transfer(range.segment, src_family, dst_family)) return;
  const bool concurrent = device_.concurrent_sharing(range.segment);
  std::lock_guard lock(mutex_);
  order({});
  VkBufferMemoryBarrier bb{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
  bb.srcAccessMask = release ? VK_ACCESS_MEMORY_WRITE_BIT : 0;  // ignored by an acquire
  bb.dstAccessMask = release ? 0 : VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  bb.srcQueueFamilyIndex = src_family;
  bb.dstQueueFamilyIndex = dst_family;
  if (concurrent) {  // external transfer of a CONCURRENT buffer: own side IGNORED
    if (src_family != VK_QUEUE_FAMILY_EXTERNAL) bb.srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
    if (dst_family != VK_QUEUE_FAMILY_EXTERNAL) bb.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  }
  bb.buffer = buffer_of(range.segment);
  bb.offset = range.offset;
  bb.size = bytes;
  device_.vk().vkCmdPipelineBarrier(current_.commands, kAllCommands, kAllCommands, 0, 0, nullptr, 1, &bb,
                                    0, nullptr);
}

void VulkanQueue::release_ownership(DeviceRef range, std::uint64_t bytes, BackendQueue& to) {
  ownership_barrier(range, bytes, family_, to.family(), true);
}

void VulkanQueue::acquire_ownership(DeviceRef range, std::uint64_t bytes, BackendQueue& from) {
  ownership_barrier(range, bytes, from.family(), family_, false);
}

// A descriptor set from the current batch's pool; a full pool ends the batch (its sets stay
// valid until the batch completes, then the pool is reset with the batch).
VkDescriptorSet VulkanQueue::allocate_set() {
  const auto& vk = device_.vk();
  if (recording_ && current_.sets_used == kSetsPerBatch) close();
  Batch& b = recording();
  if (b.descriptors == VK_NULL_HANDLE) {
    const VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2 * kSetsPerBatch};
    VkDescriptorPoolCreateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    info.maxSets = kSetsPerBatch;
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    FERRY_VK_CHECK(vk.vkCreateDescriptorPool(device_.handle(), &info, nullptr, &b.descriptors));
  }
  VkDescriptorSetAllocateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  info.descriptorPool = b.descriptors;
  info.descriptorSetCount = 1;
  info.pSetLayouts = &device_.synthetic().set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  FERRY_VK_CHECK(vk.vkAllocateDescriptorSets(device_.handle(), &info, &set));
  ++b.sets_used;
  return set;
}

// out[i] = in[i] + 1 per byte, `units` dispatches over the data (testkit/synthetic.comp, whose
// SPIR-V ferry-testkit registers). Needs the registered shader, 4-byte aligned offsets (pool
// blocks are) and a compute-capable family; else returns false.
// Ranges larger than maxStorageBufferRange are processed in chunks.
bool VulkanQueue::synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes, std::uint32_t units) {
  if (in.offset % 4 != 0 || out.offset % 4 != 0 || !device_.has_compute(family_)) return false;
  if (synthetic_kernel_image(Backend::vulkan).empty()) return false;  // no test kit's shader
  // The shader reads and writes whole words: a range whose last word extends past its buffer
  // (an adopted buffer of a size not a multiple of 4) cannot be bound.
  if ((in.offset + bytes + 3) / 4 * 4 > in.segment->size || (out.offset + bytes + 3) / 4 * 4 > out.segment->size) {
    return false;
  }
  const SyntheticPipeline& pipe = device_.synthetic();
  const auto& vk = device_.vk();
  const VkDeviceSize align = device_.limits().minStorageBufferOffsetAlignment;
  const VkDeviceSize chunk = std::min<VkDeviceSize>(
      (device_.limits().maxStorageBufferRange - align - 4) & ~VkDeviceSize{3}, VkDeviceSize{1} << 30);
  const VkBuffer in_buffer = buffer_of(in.segment), out_buffer = buffer_of(out.segment);
  struct Bound {
    VkDeviceSize begin, range;
    std::uint32_t first_word;
  };
  std::lock_guard lock(mutex_);
  for (std::uint64_t done = 0; done < bytes; done += chunk) {
    const std::uint64_t n = std::min<std::uint64_t>(chunk, bytes - done);
    auto bind = [&](VkDeviceSize offset) {
      const VkDeviceSize begin = offset / align * align;
      return Bound{begin, (offset + n + 3) / 4 * 4 - begin, static_cast<std::uint32_t>((offset - begin) / 4)};
    };
    const Bound src = bind(in.offset + done), dst = bind(out.offset + done);
    const VkDescriptorSet set = allocate_set();
    const VkDescriptorBufferInfo buffers[2] = {{in_buffer, src.begin, src.range},
                                               {out_buffer, dst.begin, dst.range}};
    VkWriteDescriptorSet writes[2] = {};
    for (std::uint32_t b = 0; b < 2; ++b) {
      writes[b].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
      writes[b].dstSet = set;
      writes[b].dstBinding = b;
      writes[b].descriptorCount = 1;
      writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[b].pBufferInfo = &buffers[b];
    }
    vk.vkUpdateDescriptorSets(device_.handle(), 2, writes, 0, nullptr);
    const std::uint32_t params[4] = {src.first_word, dst.first_word, static_cast<std::uint32_t>(n / 4),
                                     static_cast<std::uint32_t>(n % 4)};
    const VkCommandBuffer cmd = current_.commands;
    vk.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe.pipeline);
    vk.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe.layout, 0, 1, &set, 0, nullptr);
    vk.vkCmdPushConstants(cmd, pipe.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(params), params);
    const auto groups = static_cast<std::uint32_t>(std::clamp<std::uint64_t>((n / 4 + 255) / 256, 1, 65535));
    for (std::uint32_t u = 0; u < units; ++u) {
      order({{in_buffer, src.begin, src.begin + src.range, false},
             {out_buffer, dst.begin, dst.begin + dst.range, true}});
      vk.vkCmdDispatch(cmd, groups, 1, 1);
    }
  }
  return true;
}

// ---- the device's queues ----------------------------------------------------------------------

std::unique_ptr<VulkanQueue> VulkanDevice::make_queue(std::uint32_t family, std::uint32_t index,
                                                      bool owns_index) {
  VkQueue queue = VK_NULL_HANDLE;
  vk_.vkGetDeviceQueue(device_, family, index, &queue);
  if (queue == VK_NULL_HANDLE) {
    vk_fail(ErrorCode::invalid_argument, "queue " + std::to_string(index) + " of family " +
                                             std::to_string(family) + " is not part of the VkDevice");
  }
  auto result = std::make_unique<VulkanQueue>(*this, queue, family, index, owns_index);
  if (owns_index) {
    std::lock_guard lock(mutex_);
    queue_in_use_[family][index] = true;
  }
  return result;
}

BackendQueue& VulkanDevice::default_queue(QueueRole role) {
  return role == QueueRole::transfer ? *transfer_queue_ : *compute_queue_;
}

// Vulkan fixes queue priorities at device creation, so `priority` cannot be honoured as such.
// A transfer queue is a queue of the transfer family. Under FERRY_VULKAN_URGENT_FAMILY=compute
// one asked for with priority > 0 (the urgent copies' queue: transfer.hpp, "Priorities") is
// a free queue of the compute family where that family is not the transfer family's: a queue
// of another family may reach another copy engine than the bulk copies', and a destination
// owned by a compute queue then needs no queue-family ownership transfer around the copy.
std::unique_ptr<BackendQueue> VulkanDevice::create_queue(QueueRole role, int priority) {
  if (!owns_objects_) {
    vk_fail(ErrorCode::unsupported, "create_queue on an adopted device: which queues the engine "
                                    "created is unknown; adopt them with adopt_queue");
  }
  std::uint32_t family = role == QueueRole::compute ? compute_family_ : transfer_family_;
  std::uint32_t index = 0;
  {
    std::lock_guard lock(mutex_);
    const auto free_in = [&](std::uint32_t f) {
      auto& used = queue_in_use_[f];
      return static_cast<std::uint32_t>(std::find(used.begin(), used.end(), false) - used.begin());
    };
    if (role == QueueRole::transfer && priority > 0 && urgent_on_compute_ && compute_family_ != transfer_family_ &&
        free_in(compute_family_) < queue_in_use_[compute_family_].size()) {
      family = compute_family_;
    }
    index = free_in(family);
    if (index == queue_in_use_[family].size()) {
      vk_fail(ErrorCode::unsupported, "no free queue left in family " + std::to_string(family) + " (" +
                                          std::to_string(queue_in_use_[family].size()) + " created, all in use)");
    }
    queue_in_use_[family][index] = true;  // taken now: another thread's call picks another
  }
  try {
    return make_queue(family, index, true);
  } catch (...) {
    std::lock_guard lock(mutex_);
    queue_in_use_[family][index] = false;
    throw;
  }
}

std::unique_ptr<BackendQueue> VulkanDevice::adopt_queue(QueueRole role, const NativeQueue& native) {
  const auto family = native.family, index = native.index;
  const std::string which = "queue (family " + std::to_string(family) + ", index " + std::to_string(index) + ")";
  if (native.handle == nullptr) vk_fail(ErrorCode::invalid_argument, "adopt_queue: null VkQueue");
  if (family >= families_.size()) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": family out of range (" +
                                             std::to_string(families_.size()) + " families)");
  }
  if (index >= families_[family].queueCount) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": index out of range (family has " +
                                             std::to_string(families_[family].queueCount) + " queues)");
  }
  if (index >= queues_created_[family]) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": queue does not belong to this VkDevice");
  }
  if (role == QueueRole::compute && !has_compute(family)) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": family has no COMPUTE capability");
  }
  if (std::find(sharing_families_.begin(), sharing_families_.end(), family) == sharing_families_.end()) {
    vk_fail(ErrorCode::unsupported, "adopt_queue: " + which + ": ferry's buffers are shared by families " +
                                        std::to_string(compute_family_) + " and " +
                                        std::to_string(transfer_family_) + " only");
  }
  VkQueue expected = VK_NULL_HANDLE;
  vk_.vkGetDeviceQueue(device_, family, index, &expected);
  if (expected != static_cast<VkQueue>(native.handle)) {
    vk_fail(ErrorCode::invalid_argument, "adopt_queue: " + which + ": queue does not belong to this VkDevice");
  }
  return make_queue(family, index, false);
}

void VulkanDevice::release_queue_index(std::uint32_t family, std::uint32_t index) {
  std::lock_guard lock(mutex_);
  queue_in_use_[family][index] = false;
}

}  // namespace ferry::detail
