#include "model/config_values.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "attnlab/printable.h"

namespace attnlab::config_values {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::string strip_comment(const std::string& line) {
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"') quoted = !quoted;
    if (line[i] == '#' && !quoted) return line.substr(0, i);
  }
  return line;
}

std::string unquote(const std::string& v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') return v.substr(1, v.size() - 2);
  return v;
}

void bad_value(const std::string& key, const std::string& raw, const std::string& where, const std::string& expected) {
  fail(where, ": ", key, " = ", shown(raw, 80), ": expected ", expected);
}

long long parse_int(const std::string& key, const std::string& raw, const std::string& where, long long lo, long long hi) {
  const std::string v = unquote(raw);
  size_t used = 0;
  long long x = 0;
  try { x = std::stoll(v, &used); } catch (...) { bad_value(key, raw, where, "an integer"); }
  if (used != v.size()) bad_value(key, raw, where, "an integer");
  if (x < lo || x > hi) bad_value(key, raw, where, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

double parse_float(const std::string& key, const std::string& raw, const std::string& where, double lo, double hi) {
  const std::string v = unquote(raw);
  size_t used = 0;
  double x = 0;
  try { x = std::stod(v, &used); } catch (...) { bad_value(key, raw, where, "a number"); }
  if (used != v.size() || !std::isfinite(x)) bad_value(key, raw, where, "a finite number");
  if (x < lo || x > hi) {
    std::ostringstream os;
    os << "a number in [" << lo << ", " << hi << "]";
    bad_value(key, raw, where, os.str());
  }
  return x;
}

bool parse_bool(const std::string& key, const std::string& raw, const std::string& where) {
  const std::string v = unquote(raw);
  if (v == "true") return true;
  if (v == "false") return false;
  bad_value(key, raw, where, "true or false");
}

std::string parse_choice(const std::string& key, const std::string& raw, const std::string& where,
                         const std::vector<std::string>& choices) {
  const std::string v = unquote(raw);
  for (const auto& c : choices) if (v == c) return v;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : " | ") + c;
  bad_value(key, raw, where, "one of " + list);
}

std::string parse_quoted(const std::string& key, const std::string& raw, const std::string& where) {
  if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') bad_value(key, raw, where, "a quoted string such as \"text\"");
  return raw.substr(1, raw.size() - 2);
}

namespace {

// The items of a one-line list "[a, b]" (after unquoting the whole value), split at the commas
// outside quoted strings and trimmed; an empty list gives none, and a trailing comma right before
// the ']' adds no item. Returns false when `v` is not bracketed.
bool list_items(const std::string& v, std::vector<std::string>& items) {
  if (v.size() < 2 || v.front() != '[' || v.back() != ']') return false;
  items.clear();
  std::string item;
  bool quoted = false;
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] == '"') quoted = !quoted;
    if (v[i] == ',' && !quoted) {
      items.push_back(trim(item));
      item.clear();
    } else {
      item += v[i];
    }
  }
  if (!item.empty()) items.push_back(trim(item));
  return true;
}

}  // namespace

std::vector<int> parse_layers(const std::string& key, const std::string& raw, const std::string& where) {
  const std::string v = unquote(raw);
  if (v == "all") return {};
  const char* expected = "all or a list of 0-based layer indices such as [0, 2]";
  std::vector<std::string> items;
  if (!list_items(v, items)) bad_value(key, raw, where, expected);
  std::vector<int> out;
  for (const auto& t : items) {
    if (t.empty()) bad_value(key, raw, where, expected);
    const int layer = (int)parse_int(key, t, where, 0, 1 << 20);
    if (std::find(out.begin(), out.end(), layer) != out.end()) bad_value(key, raw, where, "distinct layer indices");
    out.push_back(layer);
  }
  if (out.empty()) bad_value(key, raw, where, "all or a non-empty list of layer indices");
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> parse_string_list(const std::string& key, const std::string& raw, const std::string& where) {
  const char* expected = "a one-line list of quoted strings such as [\"a\", \"b\"]";
  std::vector<std::string> items;
  if (!list_items(unquote(raw), items)) bad_value(key, raw, where, expected);
  if (!items.empty() && items.back().empty()) items.pop_back();  // ["a", ] (TOML allows a trailing comma)
  for (auto& t : items) {
    const bool whole = t.size() >= 2 && t.front() == '"' && t.back() == '"' && t.find('"', 1) == t.size() - 1;
    if (t.empty() || (t.find('"') != std::string::npos && !whole)) bad_value(key, raw, where, expected);
    t = unquote(t);
  }
  return items;
}

}  // namespace attnlab::config_values
