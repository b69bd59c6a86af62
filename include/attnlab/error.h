// attnlab public API: the one error type. Every failure of the library (a bad option, a missing
// file, a damaged checkpoint, an internal check) throws attnlab::Error, whose message names the
// option, key or file and what is wrong. The library's internals throw this same type
// (src/core/error.h includes this header), so one catch clause covers everything.
// Thread-safety: an Error is an immutable value.
#pragma once
#include <stdexcept>
#include <string>

namespace attnlab {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Long work stopped by Ctrl-C or SIGTERM (attnlab/progress.h); the message says what was done and
// how to continue. `attnlab` exits with status 3 on it, as an interrupted training does.
class Interrupted : public Error {
 public:
  using Error::Error;
};

}  // namespace attnlab
