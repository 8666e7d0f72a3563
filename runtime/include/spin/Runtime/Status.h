//===- Status.h - error values of the spin runtime --------------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The runtime is loaded into serving engines that may be built without
// exceptions, so no exception crosses its public API: every fallible call
// returns a `Status` or a `StatusOr<T>` whose message names the offending
// value ("request 42 is not in the state pool").
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_STATUS_H
#define SPIN_RUNTIME_STATUS_H

#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace spin::runtime {

/// The outcome of a fallible runtime call: success, or an error with a
/// human-readable message. `[[nodiscard]]` so that an ignored error is a
/// compiler warning rather than silently corrupted state.
class [[nodiscard]] Status {
public:
  /// A successful status. Prefer this to default construction at call sites
  /// so that the intent is visible.
  static Status success() { return Status(); }

  /// An error carrying `message`; the message must name the offending value
  /// so that it can be shown to a user unchanged. An empty message is
  /// replaced by "unknown error" so that an error never looks like success.
  static Status error(std::string message);

  Status() = default;

  /// True on success.
  [[nodiscard]] bool ok() const { return isOk; }

  /// The error message; empty on success.
  [[nodiscard]] const std::string &message() const { return text; }

  /// Marks a status as deliberately ignored (for best-effort clean-up paths).
  void ignore() const {}

private:
  bool isOk = true;
  std::string text;
};

namespace detail {
/// Prints `message` to stderr and aborts: the fate of a program that reads
/// the value of a failed `StatusOr`, a bug that no caller can recover from.
[[noreturn]] void failedStatusOrAccess(const std::string &message);
} // namespace detail

/// Either a value of type `T` or an error `Status`. Reading the value of an
/// error aborts the program (a programming error, never an input error):
/// check `ok()` first.
template <class T> class [[nodiscard]] StatusOr {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>,
                "StatusOr<Status> is meaningless: return Status");

public:
  /// Holds `value` (implicit, so that `return value;` works).
  StatusOr(T value) : stored(std::move(value)) {}

  /// Holds the error `status` (implicit, so that `return Status::error(...)`
  /// works). A successful `status` carries no value, which is a bug of the
  /// caller; it is turned into an error rather than an empty success.
  StatusOr(Status status)
      : state(status.ok() ? Status::error("internal error: StatusOr built "
                                          "from a successful Status")
                          : std::move(status)) {}

  /// True if a value is held.
  [[nodiscard]] bool ok() const { return stored.has_value(); }

  /// The error, or success if a value is held.
  [[nodiscard]] const Status &status() const { return state; }

  /// The error message; empty if a value is held.
  [[nodiscard]] const std::string &message() const { return state.message(); }

  /// The held value; aborts if this is an error.
  T &value() & {
    check();
    return *stored;
  }
  const T &value() const & {
    check();
    return *stored;
  }
  T &&value() && {
    check();
    return std::move(*stored);
  }

  T &operator*() & { return value(); }
  const T &operator*() const & { return value(); }
  T &&operator*() && { return std::move(*this).value(); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }

private:
  void check() const {
    if (!stored)
      detail::failedStatusOrAccess(state.message());
  }

  std::optional<T> stored;
  Status state;
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_STATUS_H
