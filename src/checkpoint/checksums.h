// Per-tensor checksums of a checkpoint (docs/checkpoint-format.md, "Checksums"): xxHash64 (seed 0)
// of each tensor's bytes as stored, kept in the safetensors metadata under one key as a compact
// JSON object {"name": "16 hex digits", ...}. A bit flipped inside tensor data passes every
// structural check of the container and only changes the loss; the checksum names the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace attnlab {

// The metadata key; the algorithm is in the name so that another one can be added beside it.
constexpr const char* kChecksumKey = "checksums.xxh64";

// xxHash64 with seed 0 of n bytes, as 16 lower-case hex digits (the form stored in the file).
std::string tensor_checksum(const void* data, size_t n);

// The metadata value for name -> checksum (compact JSON object, keys sorted).
std::string encode_checksums(const std::map<std::string, std::string>& checksums);

// The map stored in file `path`'s metadata value `text`; an Error naming the file and the key when
// it is not a JSON object of 16-hex-digit strings.
std::map<std::string, std::string> decode_checksums(const std::string& path, const std::string& text);

}  // namespace attnlab
