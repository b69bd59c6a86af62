#include "experiment/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "data/files.h"

namespace attnlab {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  size_t n = 1;
  for (auto d : shape) {
    dims += std::to_string(d) + ",";
    n *= (size_t)d;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + len(2) + header + '\n' padded to a multiple of 64
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  const uint16_t hlen = (uint16_t)header.size();
  // Atomic and with a temporary of its own (data/files.h): two writers of one path never mix bytes.
  data_files::write_file_atomically(path,
                                    {std::string_view("\x93NUMPY\x01\x00", 8),
                                     std::string_view(reinterpret_cast<const char*>(&hlen), 2), header,
                                     std::string_view(reinterpret_cast<const char*>(data), n * sizeof(float))},
                                    ".npy file");
}

}  // namespace attnlab
