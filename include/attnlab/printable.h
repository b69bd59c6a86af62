// attnlab public API: text from a file or the command line, made safe to put in a message. Names,
// values and lines taken from a damaged or hostile file (a binary given as a config, a garbage
// safetensors header) are quoted, their control bytes escaped (\x0a) and cut at `limit` bytes, so
// that an error can never write raw bytes to the user's terminal. The library's own messages use
// it; so do tools built on the API (the `attnlab` CLI's validators).
#pragma once
#include <cstddef>
#include <string>

namespace attnlab {

// Length of the well-formed UTF-8 sequence at s[i] that encodes a printable character (2 to 4
// bytes), or 0: a stray continuation byte, a truncated or overlong sequence, a surrogate, a code
// point beyond U+10FFFF, the C1 controls U+0080..U+009F (U+009B is CSI, which some terminals
// obey as ESC [), the line/paragraph separators and the bidirectional overrides and isolates
// (U+2028..U+202E, U+2066..U+2069: they reorder what follows on screen) all give 0, so they are
// escaped rather than written to a terminal.
inline size_t printable_utf8_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned lead = byte(i);
  size_t n = 0;
  unsigned lo = 0x80, hi = 0xbf;  // the range of the first continuation byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3;
    if (lead == 0xe0) lo = 0xa0;  // overlong
    if (lead == 0xed) hi = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4;
    if (lead == 0xf0) lo = 0x90;  // overlong
    if (lead == 0xf4) hi = 0x8f;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  if (lead == 0xc2 && byte(i + 1) <= 0x9f) return 0;  // C1 controls
  if (lead == 0xe2) {  // invisible layout controls that make a quote read other than it is
    const unsigned b1 = byte(i + 1), b2 = byte(i + 2);
    if (b1 == 0x80 && b2 >= 0xa8 && b2 <= 0xae) return 0;  // U+2028..U+202E: separators, bidi embeddings
    if (b1 == 0x81 && b2 >= 0xa6 && b2 <= 0xa9) return 0;  // U+2066..U+2069: bidi isolates
  }
  return n;
}

// 'text' with \ and ' backslash-escaped, cut at `limit` bytes ("..." after). Printable ASCII and
// well-formed UTF-8 of printable characters pass unchanged; every other byte (controls, 0x7f, C1
// controls, bytes of malformed UTF-8) becomes \xNN. A character is never cut in half. (Not named
// `quoted`: for a non-const string argument, argument-dependent lookup would prefer std::quoted.)
inline std::string printable(const std::string& s, size_t limit = 120) {
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  size_t i = 0;
  while (i < s.size() && i < limit) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += char(c);
      ++i;
    } else if (c >= 0x20 && c < 0x7f) {
      out += char(c);
      ++i;
    } else if (const size_t n = c >= 0x80 ? printable_utf8_length(s, i) : 0; n > 0 && i + n <= limit) {
      out.append(s, i, n);
      i += n;
    } else if (n > 0) {
      break;  // the character would cross the limit
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
      ++i;
    }
  }
  if (i < s.size()) out += "...";
  return out + "'";
}

// True when `s` is printable text (ASCII from 0x20, tab, or well-formed UTF-8 of printable
// characters, as printable_utf8_length): what may be echoed unquoted.
inline bool is_printable_text(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\t' || (c >= 0x20 && c < 0x7f)) {
      ++i;
    } else if (const size_t n = c >= 0x80 ? printable_utf8_length(s, i) : 0; n > 0) {
      i += n;
    } else {
      return false;
    }
  }
  return true;
}

// `s` itself when it is printable text, else printable(s): for text that is usually plain (a key,
// a path, a `--set` argument) but may hold anything.
inline std::string shown(const std::string& s, size_t limit = 120) {
  return is_printable_text(s) && s.size() <= limit ? s : printable(s, limit);
}

}  // namespace attnlab
