// Element types of tensors on disk and in memory, and the conversions between the
// 16-bit float formats and f32 (round-to-nearest-even, as torch and numpy do).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hearth {

enum class DType { kF32, kF16, kBF16, kF64, kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kBool };

std::size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "BF16", "U32", ...
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_safetensors(std::string_view name);

inline float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

}  // namespace hearth
