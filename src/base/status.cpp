// Status formatting.
#include "base/status.h"

namespace hearth {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kAlreadyExists:
      return "already exists";
    case ErrorCode::kIo:
      return "i/o error";
    case ErrorCode::kParse:
      return "parse error";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kOutOfMemory:
      return "out of memory";
    case ErrorCode::kOutOfRange:
      return "out of range";
    case ErrorCode::kPermissionDenied:
      return "permission denied";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

Status Status::with_context(std::string_view context) const& {
  if (ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

Status Status::with_context(std::string_view context) && {
  if (ok()) return std::move(*this);
  message_ = fmt::format("{}: {}", context, message_);
  return std::move(*this);
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", error_code_name(code_), message_);
}

}  // namespace hearth
