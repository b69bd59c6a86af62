// Shared pieces of the `attnlab` subcommands: config loading with --config/--preset/--set, errors,
// and the registration functions each subcommand file provides. The subcommands are written on the
// public API (include/attnlab/) alone.
#pragma once
#include <CLI/CLI.hpp>
#include <list>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab/config.h"
#include "attnlab/error.h"

namespace attnlab::cli {

// fail("--top-k ", k, ": must be >= 0") — throws attnlab::Error with the pieces streamed together
// (main() prints it and exits with status 1).
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

struct ConfigArgs {
  std::string config_file, preset;
  std::vector<std::string> sets;
  void add_to(CLI::App* cmd);
  // defaults < preset < file < --set, as a public-API configuration (resolved on use: resolve()
  // reports a bad key naming it and where it was set). Prints nothing.
  api::Config api_config() const;
};

// `--skip-checksums` on a subcommand that loads checkpoints (api::set_verify_checksums).
void add_skip_checksums_flag(CLI::App* cmd);

// Storage for what a subcommand's options and callbacks fill in: it must live as long as the App
// (CLI11 keeps pointers to it). A function-local static list (stable addresses) keeps it reachable
// and frees it at exit; a bare `new` was reported by LeakSanitizer at every normal exit of the
// sanitized tool (the debug preset), failing every command-line test there.
template <class T>
T* program_lifetime() {
  static std::list<T> kept;
  return &kept.emplace_back();
}

// What main() returns when the command ends without an error: 0, or 3 for a compare stopped early
// (resumable). Returned through main rather than std::exit, so that an mpirun process ends MPI
// (MPI_Finalize waits for the other ranks: a rank that stopped does not cut theirs short).
int& exit_status();

void register_data(CLI::App& app);
void register_train(CLI::App& app);
void register_infer(CLI::App& app);
void register_bench(CLI::App& app);
void register_analyze(CLI::App& app);
void register_task(CLI::App& app);
void register_compare(CLI::App& app);

}  // namespace attnlab::cli
