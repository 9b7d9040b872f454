// Status and Result<T>: how fallible work reports failure across layer boundaries.
// Errors carry a code and a message with context ("loading config.json: field 'x' ...");
// library code returns them instead of throwing across boundaries or exiting.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace hearth {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // the caller's input is malformed or out of range
  kNotFound,         // a file, model, tensor or key does not exist
  kAlreadyExists,
  kIo,           // the OS failed a read, write, map or socket call
  kParse,        // bytes that should follow a format do not
  kUnsupported,  // valid input that hearth does not implement
  kOutOfMemory,  // a device or host budget is exhausted
  kOutOfRange,   // e.g. a prompt longer than the context
  kPermissionDenied,
  kUnavailable,  // retryable: busy, network down, rate limited
  kCancelled,
  kInternal,  // a bug in hearth
};

std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with what was being done: "reading x.json: <message>".
  Status with_context(std::string_view context) const&;
  Status with_context(std::string_view context) &&;

  // "<code name>: <message>", or "ok".
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

#define HEARTH_DEFINE_ERROR(fn, code)                                      \
  template <typename... Args>                                              \
  Status fn(fmt::format_string<Args...> format, Args&&... args) {          \
    return Status(code, fmt::format(format, std::forward<Args>(args)...)); \
  }
HEARTH_DEFINE_ERROR(invalid_argument_error, ErrorCode::kInvalidArgument)
HEARTH_DEFINE_ERROR(not_found_error, ErrorCode::kNotFound)
HEARTH_DEFINE_ERROR(already_exists_error, ErrorCode::kAlreadyExists)
HEARTH_DEFINE_ERROR(io_error, ErrorCode::kIo)
HEARTH_DEFINE_ERROR(parse_error, ErrorCode::kParse)
HEARTH_DEFINE_ERROR(unsupported_error, ErrorCode::kUnsupported)
HEARTH_DEFINE_ERROR(out_of_memory_error, ErrorCode::kOutOfMemory)
HEARTH_DEFINE_ERROR(out_of_range_error, ErrorCode::kOutOfRange)
HEARTH_DEFINE_ERROR(permission_denied_error, ErrorCode::kPermissionDenied)
HEARTH_DEFINE_ERROR(unavailable_error, ErrorCode::kUnavailable)
HEARTH_DEFINE_ERROR(cancelled_error, ErrorCode::kCancelled)
HEARTH_DEFINE_ERROR(internal_error, ErrorCode::kInternal)
#undef HEARTH_DEFINE_ERROR

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(data_).ok()) {
      data_ = Status(ErrorCode::kInternal, "Result constructed from an ok Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  // The error; an ok Status when the result holds a value.
  Status status() const { return ok() ? Status() : std::get<Status>(data_); }

  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace hearth

#define HEARTH_CONCAT_INNER(a, b) a##b
#define HEARTH_CONCAT(a, b) HEARTH_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not ok.
#define HEARTH_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::hearth::Status hearth_status_ = (expr);        \
    if (!hearth_status_.ok()) return hearth_status_; \
  } while (0)

// `HEARTH_ASSIGN_OR_RETURN(auto x, make_x());` unwraps a Result or returns its error.
#define HEARTH_ASSIGN_OR_RETURN(lhs, expr) \
  HEARTH_ASSIGN_OR_RETURN_IMPL(HEARTH_CONCAT(hearth_result_, __LINE__), lhs, expr)
#define HEARTH_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
