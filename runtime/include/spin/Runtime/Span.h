//===- Span.h - a non-owning view of a contiguous array ---------*- C++ -*-===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// The runtime is C++17, which has no std::span; this is the small subset
// the runtime's API needs (request-id batches, byte buffers), constructible
// from a pointer and a size, a std::vector, a std::array, a C array or a
// braced list (valid for the duration of the call it is passed to).
//
//===----------------------------------------------------------------------===//

#ifndef SPIN_RUNTIME_SPAN_H
#define SPIN_RUNTIME_SPAN_H

#include <array>
#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <vector>

namespace spin::runtime {

/// A read-only view of `size()` contiguous `T`s. It never owns its
/// elements: keep the viewed storage alive while the span is used.
template <class T> class Span {
public:
  constexpr Span() = default;
  constexpr Span(const T *data, size_t size) : ptr(data), count(size) {}
  Span(const std::vector<T> &values)
      : ptr(values.data()), count(values.size()) {}
  template <size_t N>
  constexpr Span(const std::array<T, N> &values)
      : ptr(values.data()), count(N) {}
  template <size_t N>
  constexpr Span(const T (&values)[N]) : ptr(values), count(N) {}
  /// Views a braced list; the list lives until the end of the full
  /// expression, so pass `{1, 2, 3}` directly to a call, never store it.
  /// (GCC warns that the span does not extend the list's lifetime, which is
  /// exactly the documented contract; the warning is silenced here only.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  constexpr Span(std::initializer_list<T> values)
      : ptr(values.begin()), count(values.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

  constexpr const T *data() const { return ptr; }
  constexpr size_t size() const { return count; }
  constexpr bool empty() const { return count == 0; }
  constexpr const T *begin() const { return ptr; }
  constexpr const T *end() const { return ptr + count; }
  constexpr const T &operator[](size_t i) const { return ptr[i]; }

private:
  const T *ptr = nullptr;
  size_t count = 0;
};

} // namespace spin::runtime

#endif // SPIN_RUNTIME_SPAN_H
