// The plot step of the JSON-writing subcommands (plots.h).
#include "cli/plots.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace attnlab::cli {

namespace fs = std::filesystem;

std::string find_plot_script(const std::string& name, const std::string& override_path) {
  if (!override_path.empty()) return override_path;
  std::vector<fs::path> candidates;
#ifdef ATTNLAB_SOURCE_DIR
  candidates.push_back(fs::path(ATTNLAB_SOURCE_DIR) / "scripts" / name);
#endif
  candidates.push_back(fs::path("scripts") / name);
  for (const auto& c : candidates)
    if (fs::exists(c)) return c.string();
  return "";
}

std::string shell_quote(const std::string& s) {
  // Built by appends only: GCC 12 reports a false -Wrestrict on `" " + std::string` temporaries.
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q.append("'\\''");
    else q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

bool run_plot_script(const std::string& name, const std::string& override_path, const std::vector<std::string>& args) {
  const std::string py = "/usr/bin/python3", script = find_plot_script(name, override_path);
  if (::access(py.c_str(), X_OK) != 0) {
    std::printf("note: %s is missing: wrote the JSON only (plots need Debian's python3 and python3-matplotlib)\n", py.c_str());
    return false;
  }
  if (script.empty()) {
    std::printf("note: scripts/%s not found (pass --plot-script): wrote the JSON only\n", name.c_str());
    return false;
  }
  std::string cmd = py, by_hand = py;
  cmd.append(" ").append(shell_quote(script));
  by_hand.append(" ").append(script);
  for (const auto& a : args) {
    cmd.append(" ").append(shell_quote(a));
    by_hand.append(" ").append(a);
  }
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  const int code = rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  if (code == 3)
    std::printf("note: matplotlib is not installed for %s: wrote the JSON only (apt-get install python3-matplotlib, then run %s)\n",
                py.c_str(), by_hand.c_str());
  else if (code != 0)
    std::printf("note: the plotting script failed (exit %d): the JSON is complete\n", code);
  return code == 0;
}

}  // namespace attnlab::cli
