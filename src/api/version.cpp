// attnlab::api::library_version (include/attnlab/version.h).
#include "attnlab/version.h"

#include "model/version.h"

namespace attnlab::api {
const char* library_version() { return attnlab::version(); }
}  // namespace attnlab::api
