#include "experiment/compare/common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace attnlab::compare {

using nlohmann::json;

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot read ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  const std::string text = read_text(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based, one past the offending character.
    const size_t at = std::min(text.size(), e.byte > 0 ? size_t(e.byte - 1) : size_t(0));
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') ++line, column = 1;
      else ++column;
    }
    // The parser's own words, without its "[json.exception.parse_error.101] parse error at ...: " prefix.
    std::string why = e.what();
    const size_t colon = why.find(": ");
    if (colon != std::string::npos) why = why.substr(colon + 2);
    const bool truncated = at >= text.size() || text.find_first_not_of(" \t\r\n", at) == std::string::npos;
    fail(what, " ", path, ", line ", line, ", column ", column, ": not valid JSON (", why, ")",
         truncated ? "; the file ends early (truncated?)" : "");
  } catch (const nlohmann::json::exception& e) {
    // The parser's other refusals (a number beyond double, "1e999": out_of_range.406) carry no
    // byte position; fuzz_results found the first one ending in std::terminate.
    std::string why = e.what();
    const size_t bracket = why.find("] ");
    if (bracket != std::string::npos) why = why.substr(bracket + 2);
    fail(what, " ", path, ": not valid JSON (", why, ")");
  }
}

std::string sets_text(const std::vector<std::string>& sets) {
  std::string s;
  for (const auto& x : sets) s += (s.empty() ? "" : "; ") + x;
  return s;
}

namespace {
// A word as the shell reads it back: as is when it holds only safe characters, else single-quoted.
std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@%") == std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

std::string resume_command(const std::string& grid_path, const std::string& out, const char* flag) {
  return "attnlab compare " + (grid_path.empty() ? std::string("GRID") : shell_word(grid_path)) + " --out " + shell_word(out) + " " + flag;
}

std::string num(const nlohmann::json& x, const char* format) {
  if (!x.is_number()) return "–";
  char b[64];
  std::snprintf(b, sizeof b, format, x.get<double>());
  return b;
}

std::string pval(const nlohmann::json& x) { return x.is_number() ? num(x, x.get<double>() < 1e-3 ? "%.1e" : "%.3f") : "–"; }

}  // namespace attnlab::compare
