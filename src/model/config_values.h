// The values of the configuration's TOML subset as text (model/config.h: integers, floats,
// true/false, "strings" and bare words, one-line [lists]): the parsers the config keys and the
// `attnlab compare` grid file (eval/compare.h) share, so both accept and reject the same text with
// the same messages. Every parser takes the key, the raw text and where it came from ("file:line",
// "--set ...") and fails with `where: key = raw: expected ...`.
#pragma once
#include <string>
#include <vector>

namespace attnlab::config_values {

std::string trim(const std::string& s);
// Strips a trailing comment that is not inside a quoted string.
std::string strip_comment(const std::string& line);
// "text" → text; anything else unchanged (bare words are strings too).
std::string unquote(const std::string& v);

[[noreturn]] void bad_value(const std::string& key, const std::string& raw, const std::string& where, const std::string& expected);

long long parse_int(const std::string& key, const std::string& raw, const std::string& where, long long lo, long long hi);
double parse_float(const std::string& key, const std::string& raw, const std::string& where, double lo, double hi);
bool parse_bool(const std::string& key, const std::string& raw, const std::string& where);
std::string parse_choice(const std::string& key, const std::string& raw, const std::string& where,
                         const std::vector<std::string>& choices);
// A string that must be quoted ("text"), where a bare word would more likely be a mistake.
std::string parse_quoted(const std::string& key, const std::string& raw, const std::string& where);
// A layer selection (§7.2 `layers = all | [i, ...]`): "all" gives an empty list; otherwise a list
// of distinct non-negative integers, sorted. The range [0, L) is checked once n_layer is known.
std::vector<int> parse_layers(const std::string& key, const std::string& raw, const std::string& where);
// A one-line list of strings, ["a", "b"] (bare items are strings too; [] is empty): the items unquoted.
std::vector<std::string> parse_string_list(const std::string& key, const std::string& raw, const std::string& where);

}  // namespace attnlab::config_values
