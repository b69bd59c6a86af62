// Minimal NumPy .npy (format 1.0) writer for float32 arrays: `attnlab forward --out logits.npy`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnlab {
// Atomic (temp file + rename). Errors name the path.
void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
}  // namespace attnlab
