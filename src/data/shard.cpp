// attnlab data: llm.c-format token shards (docs/data.md, "Token shards").
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "data/files.h"

namespace attnlab {

namespace {
constexpr const char* kHowToMake = "run `attnlab prepare --input FILE... --out DIR` to make train.bin and val.bin";
}  // namespace

void write_shard(const std::string& path, const uint16_t* tokens, size_t n) {
  if (n > size_t(std::numeric_limits<int32_t>::max()))
    fail("shard ", path, ": ", n, " tokens do not fit the header's int32 count; split the corpus into several shards");
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(n);
  data_files::write_file_atomically(
      path,
      {std::string_view(reinterpret_cast<const char*>(header), sizeof(header)),
       std::string_view(reinterpret_cast<const char*>(tokens), n * sizeof(uint16_t))},
      "shard");
}

Shard Shard::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("shard ", path, ": cannot open (", std::strerror(errno), "); ", kHowToMake);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("shard ", path, ": not a regular file; ", kHowToMake);
  }
  const size_t bytes = size_t(st.st_size);
  int32_t header[kShardHeaderInts] = {};
  const ssize_t got = bytes >= kShardHeaderBytes ? ::pread(fd, header, kShardHeaderBytes, 0) : 0;
  if (got != ssize_t(kShardHeaderBytes)) {
    ::close(fd);
    fail("shard ", path, ": ", bytes, " bytes, too short for the ", kShardHeaderBytes,
         "-byte header: the file is truncated or not a token shard; ", kHowToMake);
  }
  // Validate everything before mapping, so a bad file costs nothing and says what is wrong.
  auto reject = [&](auto... what) {
    ::close(fd);
    fail("shard ", path, ": ", what..., "; ", kHowToMake);
  };
  if (header[0] != kShardMagic)
    reject("magic number ", header[0], " where ", kShardMagic, " was expected: not an attnlab/llm.c token shard");
  if (header[1] != kShardVersion)
    reject("format version ", header[1], ", but this build reads version ", kShardVersion,
           " (uint16 tokens): the shard was written by another tool or version");
  if (header[2] < 0) reject("negative token count ", header[2], " in the header: the file is corrupt");
  const size_t n = size_t(header[2]);
  const size_t expected = kShardHeaderBytes + n * sizeof(uint16_t);
  if (bytes != expected)
    reject("the header promises ", n, " tokens (", expected, " bytes) but the file has ", bytes, " bytes: it is ",
           bytes < expected ? "truncated" : "longer than its header says (corrupt)");

  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) fail("shard ", path, ": cannot map ", bytes, " bytes (", std::strerror(map_errno), ")");
  // Training reads windows at random offsets of the whole shard: ask for it all up front.
  ::madvise(map, bytes, MADV_WILLNEED);

  Shard shard;
  shard.map_ = map;
  shard.map_bytes_ = bytes;
  shard.tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kShardHeaderBytes);
  shard.n_ = n;
  shard.path_ = path;
  return shard;
}

void Shard::validate_vocab(int vocab_size) const {
  if (vocab_size <= 0) fail("shard ", path_, ": cannot check token ids against a vocabulary of ", vocab_size);
  // One pass, no early exit in the hot loop: find the maximum, then look up where it is.
  uint16_t largest = 0;
  for (size_t i = 0; i < n_; ++i) largest = tokens_[i] > largest ? tokens_[i] : largest;
  if (n_ == 0 || int(largest) < vocab_size) return;
  for (size_t i = 0; i < n_; ++i)
    if (int(tokens_[i]) >= vocab_size)
      fail("shard ", path_, ": token ", tokens_[i], " at position ", i, " is outside the vocabulary of ", vocab_size,
           " ids: the shard was made with another tokenizer or vocab size; run `attnlab prepare` again or use the "
           "model's tokenizer");
}

Shard::Shard(Shard&& other) noexcept { *this = std::move(other); }

Shard& Shard::operator=(Shard&& other) noexcept {
  if (this != &other) {
    unmap();
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    n_ = std::exchange(other.n_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

Shard::~Shard() { unmap(); }

void Shard::unmap() noexcept {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

}  // namespace attnlab
