// Small pieces the files of `attnlab compare` (eval/compare.h) share: reading a text file, a
// number as JSON (null when not finite, as results.json writes it), a list of settings as text.
#pragma once
#include <string>
#include <vector>

#include "core/json.h"

namespace attnlab::compare {

std::string read_text(const std::string& path);
// The JSON document in file `path`; an Error "<what> <path>, line L, column C: not valid JSON (...)"
// naming the position (a truncated file: "the file ends early") instead of the parser's raw text.
nlohmann::json read_json_file(const std::string& path, const std::string& what);
nlohmann::json num_or_null(double v);
// A table cell: the number printf-formatted, "–" when it is not a number (null in results.json).
std::string num(const nlohmann::json& x, const char* format);
// A p-value cell: %.3f, or %.1e below 0.001; "–" when absent.
std::string pval(const nlohmann::json& x);
// "a=1; b=2": a variant's or task's sets as the log and results.md show them.
std::string sets_text(const std::vector<std::string>& sets);
// The command that continues a grid, to paste: "attnlab compare GRID_PATH --out OUT --resume" (or
// another flag: --merge), each word quoted for the shell where it needs it (GRID when the grid came as
// text, grid_path empty).
std::string resume_command(const std::string& grid_path, const std::string& out, const char* flag = "--resume");

}  // namespace attnlab::compare
