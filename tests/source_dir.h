// The source tree the tests read committed files from (configs/, tests/data/): ATTNLAB_SOURCE_DIR,
// which CMake sets for every unit test, else the tree this file is in.
#pragma once
#include <cstdlib>
#include <string>

namespace attnlab::test {

inline std::string source_dir() {
  if (const char* s = std::getenv("ATTNLAB_SOURCE_DIR"); s && *s) return s;
  const std::string f = __FILE__;
  return f.substr(0, f.rfind("/tests/"));
}

}  // namespace attnlab::test
