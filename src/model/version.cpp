#include "model/version.h"

#ifndef ATTNLAB_VERSION
#error "ATTNLAB_VERSION is set by CMakeLists.txt from project(VERSION)"
#endif

namespace attnlab {
const char* version() { return ATTNLAB_VERSION; }
}  // namespace attnlab
