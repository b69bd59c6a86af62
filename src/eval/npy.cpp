#include "eval/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

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
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("cannot write ", path, ": ", std::strerror(errno));
  const uint16_t hlen = (uint16_t)header.size();
  bool ok = std::fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && std::fwrite(&hlen, 2, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() && std::fwrite(data, sizeof(float), n, f) == n;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("cannot write ", path, ": ", std::strerror(errno));
  }
}

}  // namespace attnlab
