// CLI11 validators for the `attnlab` options that say what is allowed in the user's terms: "must be
// ≥ 1, got 0" where CLI::PositiveNumber says "Value 0 not in range 0.000000 to 1797693134862315…"
// (300 digits). Each checks the text as given, before CLI11 converts it, and echoes it escaped
// (attnlab/printable.h), so a binary argument cannot garble the terminal.
#pragma once
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attnlab/printable.h"

namespace attnlab::cli {

namespace detail {
// `text` as a whole integer (decimal, optional sign, surrounding blanks allowed as CLI11 trims them);
// false when it is not one or does not fit int64.
inline bool parse_integer(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE) return false;
  out = v;
  return true;
}
}  // namespace detail

// An integer ≥ `least`; `meaning` is appended to the message ("0 = all").
inline CLI::Validator at_least(int64_t least, const std::string& meaning = "") {
  const std::string rule = "≥ " + std::to_string(least);
  const std::string shown_rule = "(" + rule + ")";  // the help's type column: "INT:(≥ 1)=8"
  return CLI::Validator(
      [least, rule, meaning](std::string& value) -> std::string {
        int64_t v = 0;
        const std::string why = meaning.empty() ? "" : " (" + meaning + ")";
        if (!detail::parse_integer(value, v)) return "must be a whole number " + rule + why + ", got " + printable(value, 40);
        if (v < least) return "must be " + rule + why + ", got " + value;
        return "";
      },
      shown_rule);
}

// An integer in [lo, hi].
inline CLI::Validator in_range(int64_t lo, int64_t hi) {
  const std::string rule = "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, rule](std::string& value) -> std::string {
        int64_t v = 0;
        if (!detail::parse_integer(value, v)) return "must be a whole number " + rule + ", got " + printable(value, 40);
        if (v < lo || v > hi) return "must be " + rule + ", got " + value;
        return "";
      },
      "(" + rule + ")");
}

// A seed: a whole number in [0, 2^64 − 1] ("-1" would otherwise wrap round to 2^64 − 1).
inline CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const bool digits = !value.empty() && value.size() <= 20 && value.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        if (digits) (void)std::strtoull(value.c_str(), nullptr, 10);
        if (!digits || errno == ERANGE) return "must be a whole number in [0, 2^64 - 1], got " + printable(value, 40);
        return "";
      },
      "(≥ 0)");
}

// Text that must not be empty (`--lengths ""` would otherwise mean "no --lengths").
inline CLI::Validator not_empty(const std::string& example) {
  return CLI::Validator(
      [example](std::string& value) -> std::string {
        if (value.find_first_not_of(" \t") == std::string::npos) return "must not be empty (e.g. " + example + ")";
        return "";
      },
      "");
}

}  // namespace attnlab::cli
