// attnlab data: small file helpers shared by the tokenizer, shards and prepare().
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace attnlab::data_files {

// Reads a whole text file. `role` names it in errors ("prepare input"); a missing file, a
// directory or an empty file is an Error naming the path.
std::string read_text_file(const std::string& path, const char* role);

// Writes the concatenation of `parts` to `path` atomically: a temporary of its own
// (core/files.h), fsync, rename, fsync of the
// directory. On failure the temporary is removed and an existing `path` is left untouched.
void write_file_atomically(const std::string& path, std::initializer_list<std::string_view> parts, const char* role);

}  // namespace attnlab::data_files
