// SPDX-License-Identifier: MIT
// ferry-testkit's synthetic compute step (testing.hpp run_synthetic_compute), registered with
// libferry by the kit, whose Vulkan backend runs it: out[i] = in[i] + 1 per
// byte, wrapping, four bytes per invocation and iteration (grid-stride loop). The host binds
// `in` and `out` as storage buffers whose ranges start at most one offset alignment before the
// data; `*_first` are the data's first words inside those ranges. A tail of 1..3 bytes is
// merged into the last word of `out` so bytes past the end are left as they were.
#version 450
layout(local_size_x = 256) in;

layout(set = 0, binding = 0, std430) readonly buffer In { uint src[]; };
layout(set = 0, binding = 1, std430) buffer Out { uint dst[]; };

layout(push_constant) uniform Params {
  uint src_first;   // first word of the input inside the bound range
  uint dst_first;   // first word of the output inside the bound range
  uint words;       // whole words to process
  uint tail_bytes;  // 0..3 bytes after the whole words
} p;

// Byte-wise increment of four packed bytes: the low 7 bits of each byte never carry into the
// next byte; bit 7 is restored by the xor (0xff + 1 wraps to 0x00).
uint inc_bytes(uint w) { return ((w & 0x7f7f7f7fu) + 0x01010101u) ^ (w & 0x80808080u); }

void main() {
  uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.words; i += stride) {
    dst[p.dst_first + i] = inc_bytes(src[p.src_first + i]);
  }
  if (gl_GlobalInvocationID.x == 0u && p.tail_bytes != 0u) {
    uint mask = (1u << (8u * p.tail_bytes)) - 1u;
    uint o = p.dst_first + p.words;
    dst[o] = (dst[o] & ~mask) | (inc_bytes(src[p.src_first + p.words]) & mask);
  }
}
