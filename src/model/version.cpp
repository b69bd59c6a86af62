#include "model/version.h"

namespace attnlab {
const char* version() { return "0.1.0"; }
}  // namespace attnlab
