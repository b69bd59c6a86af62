#pragma once
namespace attnlab {
// The library version, stored in checkpoint metadata and printed in the run banner.
const char* version();
}  // namespace attnlab
