// Shared pieces of the `attnlab` subcommands: config loading with --config/--preset/--set, token
// files, and the registration functions each subcommand file provides.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace attnlab::cli {

struct ConfigArgs {
  std::string config_file, preset;
  std::vector<std::string> sets;
  void add_to(CLI::App* cmd);
  Config resolve() const;  // defaults < preset < file < --set; prints nothing
};

// The configuration stored in a checkpoint, plus --set overrides (e.g. more train.steps): what
// `--resume` trains with when no --config or --preset is given.
Config resume_config(const std::string& checkpoint, const std::vector<std::string>& sets);

// Reads token ids: an llm.c shard (by its magic) → one sequence; otherwise a text file with one
// sequence of whitespace-separated ids per line (all lines the same length). Errors name the file.
std::vector<std::vector<int32_t>> read_token_file(const std::string& path);

void register_data(CLI::App& app);
void register_train(CLI::App& app);
void register_infer(CLI::App& app);
void register_bench(CLI::App& app);
void register_analyze(CLI::App& app);
void register_task(CLI::App& app);
void register_compare(CLI::App& app);

}  // namespace attnlab::cli
