// Shared pieces of the `attnlab` subcommands: config loading with --config/--preset/--set, token
// files, and the registration functions each subcommand file provides.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "attnlab/config.h"

namespace attnlab {
struct Config;  // model/config.h: included by the subcommands that resolve internal configurations
}

namespace attnlab::cli {

struct ConfigArgs {
  std::string config_file, preset;
  std::vector<std::string> sets;
  void add_to(CLI::App* cmd);
  Config resolve() const;  // defaults < preset < file < --set; prints nothing
  // The same assignments as a public-API configuration (resolved on use, with the same errors).
  api::Config api_config() const;
};

// The configuration stored in a checkpoint, plus --set overrides (e.g. more train.steps): what
// `--resume` trains with when no --config or --preset is given.
Config resume_config(const std::string& checkpoint, const std::vector<std::string>& sets);
api::Config resume_api_config(const std::string& checkpoint, const std::vector<std::string>& sets);

// Reads token ids: an llm.c shard (by its magic) → one sequence; otherwise a text file with one
// sequence of whitespace-separated ids per line (all lines the same length). Errors name the file.
std::vector<std::vector<int32_t>> read_token_file(const std::string& path);

// Storage for what a subcommand's options and callbacks fill in: it must live as long as the App
// (CLI11 keeps pointers to it). A function-local static list (stable addresses) keeps it reachable
// and frees it at exit; a bare `new` was reported by LeakSanitizer at every normal exit of the
// sanitized tool (the debug preset), failing every command-line test there.
template <class T>
T* program_lifetime() {
  static std::list<T> kept;
  return &kept.emplace_back();
}

void register_data(CLI::App& app);
void register_train(CLI::App& app);
void register_infer(CLI::App& app);
void register_bench(CLI::App& app);
void register_analyze(CLI::App& app);
void register_task(CLI::App& app);
void register_compare(CLI::App& app);

}  // namespace attnlab::cli
