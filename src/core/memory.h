// attnlab core: the machine's memory, for refusing work that cannot fit before it starts (a
// `std::bad_alloc` an hour in, or the OOM killer, names nothing the user can change).
#pragma once
#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/error.h"

namespace attnlab {

// Physical memory in bytes (0 when the system does not say).
inline double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

// "12.3 GB" / "850 MB": a byte count for a message.
inline std::string memory_text(double bytes) {
  char buf[32];
  if (bytes >= 1e9) std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  else std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  return buf;
}

// Error "<what> needs <bytes> (<how>), more than this machine's <memory>; <advice>" when `bytes`
// exceeds the physical memory.
inline void check_fits_in_memory(const std::string& what, double bytes, const std::string& how, const std::string& advice) {
  const double memory = physical_memory_bytes();
  if (memory > 0 && bytes > memory)
    fail(what, " needs ", memory_text(bytes), " (", how, "), more than this machine's ", memory_text(memory), "; ", advice);
}

}  // namespace attnlab
