#!/usr/bin/env bash
# Include rules, checked on the sources:
# - the command-line tool is written on the public API (issue 24): src/cli/ includes the headers of
#   include/attnlab/ and its own cli/ headers, never the library's internal ones (src/core, src/model, ...);
# - nlohmann::json comes only through src/core/json.h, which keeps its key checks on in release
#   builds; every file must see that one definition (the header says why).
# Usage: test_include_rules.sh ATTNLAB_BINARY SOURCE_DIR
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
# nlohmann::json through core/json.h only (json_fwd.hpp declares the types and no checks).
direct=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]nlohmann/json\.hpp[>"]' "$SRC"/src "$SRC"/include \
  "$SRC"/tests "$SRC"/fuzz "$SRC"/python/src "$SRC"/examples 2>/dev/null | grep -v '^'"$SRC"'/src/core/json\.h:' || true)
check "nlohmann/json.hpp is included only by src/core/json.h" '[ -z "$direct" ]' || true
[ -n "$direct" ] && echo "$direct"
finish
