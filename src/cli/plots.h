// The plot step shared by the subcommands that write a JSON report (`attnlab analyze`, `attnlab eval
// --lengths --json`, `attnlab task --eval --json`): run a matplotlib script of scripts/ with Debian's
// /usr/bin/python3 after the JSON is written. The JSON is always complete; without python3, the
// script or matplotlib, a note says so (and how to draw the plots later) instead of an error.
#pragma once
#include <string>
#include <vector>

namespace attnlab::cli {

// The script scripts/NAME: `override_path` when not empty, else in the source tree the tool was built
// from (ATTNLAB_SOURCE_DIR), else relative to the working directory; "" when none exists.
std::string find_plot_script(const std::string& name, const std::string& override_path);

// A string quoted for /bin/sh.
std::string shell_quote(const std::string& s);

// Runs `/usr/bin/python3 SCRIPT ARGS...` (SCRIPT from find_plot_script) and prints a note when it
// cannot: python3 missing, the script not found, matplotlib missing (the script's exit status 3) or
// the script failing. Returns true when the script ran and succeeded.
bool run_plot_script(const std::string& name, const std::string& override_path, const std::vector<std::string>& args);

}  // namespace attnlab::cli
