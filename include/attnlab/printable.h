// attnlab public API: text from a file or the command line, made safe to put in a message. Names,
// values and lines taken from a damaged or hostile file (a binary given as a config, a garbage
// safetensors header) are quoted, their control bytes escaped (\x0a) and cut at `limit` bytes, so
// that an error can never write raw bytes to the user's terminal. The library's own messages use
// it; so do tools built on the API (the `attnlab` CLI's validators).
#pragma once
#include <cstddef>
#include <string>

namespace attnlab {

// 'text' with \ and ' backslash-escaped, bytes below 0x20 and 0x7f as \xNN, cut at `limit` bytes
// ("..." after). UTF-8 sequences (bytes >= 0x80) pass unchanged. (Not named `quoted`: for a
// non-const string argument, argument-dependent lookup would prefer std::quoted.)
inline std::string printable(const std::string& s, size_t limit = 120) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += char(c);
    } else if (c >= 0x20 && c != 0x7f) {
      out += char(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > limit) out += "...";
  return out + "'";
}

// True when every byte of `s` is printable text (ASCII from 0x20, tab, or a byte >= 0x80 of
// UTF-8): what may be echoed unquoted.
inline bool is_printable_text(const std::string& s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  return true;
}

// `s` itself when it is printable text, else printable(s): for text that is usually plain (a key,
// a path, a `--set` argument) but may hold anything.
inline std::string shown(const std::string& s, size_t limit = 120) {
  return is_printable_text(s) && s.size() <= limit ? s : printable(s, limit);
}

}  // namespace attnlab
