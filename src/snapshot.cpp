// SPDX-License-Identifier: MIT
// Snapshot value helpers and the documented JSON exporter (schema: tools/snapshot.schema.json).
#include "ferry/snapshot.hpp"

#include <sstream>

#include "json.hpp"
#include "write_file.hpp"

namespace ferry {

std::string_view to_string(PoolEventKind kind) noexcept {
  switch (kind) {
    case PoolEventKind::alloc: return "alloc";
    case PoolEventKind::free_requested: return "free_requested";
    case PoolEventKind::free_completed: return "free_completed";
    case PoolEventKind::segment_alloc: return "segment_alloc";
    case PoolEventKind::segment_free: return "segment_free";
  }
  return "unknown";
}

std::string_view to_string(BlockStateKind kind) noexcept {
  switch (kind) {
    case BlockStateKind::active_allocated: return "active_allocated";
    case BlockStateKind::active_pending_free: return "active_pending_free";
    case BlockStateKind::inactive: return "inactive";
  }
  return "unknown";
}

std::string to_json(const MemorySnapshot& s) {
  std::ostringstream o;
  o << "{\n  \"format\": \"ferry-snapshot\",\n  \"version\": 1,\n  \"device\": ";
  o << detail::json_string(s.device_name);
  o << ",\n  \"backend\": ";
  o << detail::json_string(s.backend);
  o << ",\n  \"queues\": [";
  for (std::size_t i = 0; i < s.queues.size(); ++i) {
    const auto& q = s.queues[i];
    o << (i ? ",\n    " : "\n    ") << "{\"id\": " << q.id << ", \"name\": ";
    o << detail::json_string(q.name);
    o << ", \"role\": ";
    o << detail::json_string(q.role);
    o << "}";
  }
  o << "\n  ],\n  \"segments\": [";
  for (std::size_t i = 0; i < s.segments.size(); ++i) {
    const auto& g = s.segments[i];
    o << (i ? ",\n    " : "\n    ") << "{\"address\": " << g.address << ", \"total_size\": " << g.total_size
      << ", \"allocated_size\": " << g.allocated_size << ", \"active_size\": " << g.active_size
      << ", \"requested_size\": " << g.requested_size << ", \"queue\": " << g.queue_id
      << ", \"segment_type\": " << (g.large ? "\"large\"" : "\"small\"") << ", \"blocks\": [";
    for (std::size_t j = 0; j < g.blocks.size(); ++j) {
      const auto& b = g.blocks[j];
      o << (j ? ", " : "") << "{\"address\": " << b.address << ", \"size\": " << b.size
        << ", \"requested_size\": " << b.requested_size << ", \"state\": \"" << to_string(b.state)
        << "\", \"queue\": " << b.queue_id << ", \"tag\": ";
      o << detail::json_string(b.tag);
      o << "}";
    }
    o << "]}";
  }
  o << "\n  ],\n  \"events\": [";
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& e = s.events[i];
    o << (i ? ",\n    " : "\n    ") << "{\"action\": \"" << to_string(e.kind) << "\", \"address\": " << e.address
      << ", \"size\": " << e.size << ", \"queue\": " << e.queue_id << ", \"time_ns\": " << e.time_ns
      << ", \"tag\": ";
    o << detail::json_string(e.tag);
    o << "}";
  }
  o << "\n  ],\n  \"activity\": [";
  for (std::size_t i = 0; i < s.activity.size(); ++i) {
    const auto& a = s.activity[i];
    o << (i ? ",\n    " : "\n    ") << "{\"queue\": " << a.queue_id << ", \"name\": ";
    o << detail::json_string(a.name);
    o << ", \"begin_ns\": " << a.begin_ns << ", \"end_ns\": " << a.end_ns << ", \"bytes\": " << a.bytes << "}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

void write_json(const MemorySnapshot& snapshot, const std::filesystem::path& path, std::source_location where) {
  detail::write_file("write_json", to_json(snapshot), path, where);
}

}  // namespace ferry
