// libFuzzer target for the safetensors header parser (built with -DHEARTH_FUZZ=ON, clang):
// any bytes must yield a header or an error, never a crash, leak or UB.
#include <cstddef>
#include <cstdint>
#include <span>

#include "models/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = hearth::parse_safetensors_header(std::span<const uint8_t>(data, size));
  (void)header.ok();
  return 0;
}
