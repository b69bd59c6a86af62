// attnlab data: token shards in llm.c's format (llmc/dataloader.h), so shards are interchangeable
// with llm.c's tooling. Layout (docs/data.md, little-endian):
//   header: 256 int32 = 1024 bytes; [0] magic 20240520, [1] version 1, [2] token count N, rest 0
//   body:   N uint16 token ids
// The reader maps the file and checks magic, version and size against N before anything is read,
// with errors that name the file and say what to run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace attnlab {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);

// Writes tokens[0..n) as a shard at `path`, atomically: a temporary of its own, fsync, rename (and an fsync of
// the directory), so a reader never sees a half-written shard and an old one stays intact until
// the new one is complete. n must fit the header's int32 count.
void write_shard(const std::string& path, const uint16_t* tokens, size_t n);

class Shard {
 public:
  // Maps and validates a shard; a missing, truncated or foreign file is an Error naming it.
  static Shard open(const std::string& path);

  size_t size() const { return n_; }
  const uint16_t* tokens() const { return tokens_; }
  uint16_t operator[](size_t i) const { return tokens_[i]; }
  const std::string& path() const { return path_; }

  // Checks every id is below vocab_size (once, on open: a shard made with a larger tokenizer
  // would otherwise index past the embedding table). The error names the first bad position.
  void validate_vocab(int vocab_size) const;

  Shard(Shard&& other) noexcept;
  Shard& operator=(Shard&& other) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  ~Shard();

 private:
  Shard() = default;
  void unmap() noexcept;

  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  size_t n_ = 0;
  std::string path_;
};

}  // namespace attnlab
