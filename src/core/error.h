// attnlab core: the one error type. Every user-facing failure throws attnlab::Error with a message
// that names the file or option and what is wrong; the CLI prints it and exits with status 1.
// The type itself is public (include/attnlab/error.h): users of the API catch what the internals throw.
#pragma once
#include <string>
#include <sstream>

#include "attnlab/error.h"

namespace attnlab {

namespace detail {
inline void append(std::ostringstream&) {}
template <class A, class... R>
void append(std::ostringstream& os, const A& a, const R&... r) { os << a; append(os, r...); }
}  // namespace detail

// fail("checkpoint ", path, ": header is truncated") — builds the message from its pieces.
template <class... A>
[[noreturn]] void fail(const A&... parts) {
  std::ostringstream os;
  detail::append(os, parts...);
  throw Error(os.str());
}

// Internal invariants (programming errors, not user input).
#define ATTNLAB_CHECK(cond, ...) \
  do { if (!(cond)) ::attnlab::fail("internal check failed: " #cond " at " __FILE__ ":", __LINE__, " ", ##__VA_ARGS__); } while (0)

}  // namespace attnlab
