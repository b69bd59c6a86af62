#!/usr/bin/env bash
# The command-line tool is written on the public API (issue 24): src/cli/ includes the headers of
# include/attnlab/ and its own cli/ headers, never the library's internal ones (src/core, src/model, ...).
# Usage: test_api_only.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"
internal=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$SRC"/src/cli/*.cpp "$SRC"/src/cli/*.h \
  | grep -vE '#[[:space:]]*include[[:space:]]*"(attnlab|cli)/' || true)
check "src/cli includes only attnlab/ and cli/ headers" '[ -z "$internal" ]' || true
[ -n "$internal" ] && echo "$internal"
# The Python extension (python/src/) binds the same public API: attnlab/ and nanobind headers and its own.
internal=$(grep -nE '^[[:space:]]*#[[:space:]]*include' "$SRC"/python/src/*.cpp "$SRC"/python/src/*.h \
  | grep -vE '#[[:space:]]*include[[:space:]]*(<(attnlab|nanobind)/|<[a-z_]+>|"bindings\.h")' || true)
check "python/src includes only attnlab/, nanobind/, standard and its own headers" '[ -z "$internal" ]' || true
[ -n "$internal" ] && echo "$internal"
finish
