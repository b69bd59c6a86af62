// attnlab core: the one way the project includes nlohmann::json (tests/cli/test_include_rules.sh
// checks that no other file includes it directly).
//
// Why: the documents attnlab reads back (results.json, config and metadata JSON, checkpoint
// headers) come from disk and may be damaged or hand-edited. nlohmann's const operator[] checks a
// missing key only with JSON_ASSERT, which is assert() and so compiled out of a release build: the
// read is then undefined (fuzz_results read freed memory through it; docs/reliability.md,
// "Fuzzing"). Here JSON_ASSERT stays on in every build and a failed check throws
// nlohmann::json::out_of_range, a json::exception, which every reader already turns into an
// attnlab::Error naming its file. Every file must see the same definition (a class template's
// member functions would otherwise differ between files), hence one header and the check above.
//
// Not covered: const operator[] with an index past an array's end has no check in nlohmann at
// all; readers of documents check an array's size before indexing it.
#pragma once

namespace attnlab::json_checks {
// Throws nlohmann::json::out_of_range (defined in json.cpp, which can name the type).
[[noreturn]] void value_missing(const char* condition);
}  // namespace attnlab::json_checks

#ifdef JSON_ASSERT
#error "core/json.h must be the first to define JSON_ASSERT: include it instead of <nlohmann/json.hpp>"
#endif
// A call, not a throw-expression: nlohmann also asserts inside noexcept functions (internal
// invariants that input cannot break), where a call ends the program cleanly instead of warning.
#define JSON_ASSERT(condition) \
  ((condition) ? static_cast<void>(0) : ::attnlab::json_checks::value_missing(#condition))

#include <nlohmann/json.hpp>

namespace attnlab {
// Element i of an array in a document read from disk, or null when x is not an array or is
// shorter (nlohmann's const operator[] does not check the index: see above).
inline const nlohmann::json& element(const nlohmann::json& x, size_t i) {
  static const nlohmann::json null_value;
  return x.is_array() && i < x.size() ? x[i] : null_value;
}
}  // namespace attnlab
