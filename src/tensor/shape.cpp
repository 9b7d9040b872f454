// Shape formatting for messages.
#include "tensor/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hearth {

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims_, ", ")); }

}  // namespace hearth
