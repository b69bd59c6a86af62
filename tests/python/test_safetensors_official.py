#!/usr/bin/env python3
"""Differential test of attnlab's safetensors reader/writer against the official implementation.

Run by CTest as:  /usr/bin/python3 test_safetensors_official.py <attnlab-binary> <source-dir>

1. Writes a corpus with the official `safetensors` package (numpy backend): valid files of every
   numpy-representable dtype (scalars, empty tensors, odd sizes, unicode names and metadata), hand-made
   corruptions, random byte mutations and random header edits (a dimension, an offset, a dtype, an
   entry, the metadata, the data length) of the valid files. Each file gets the official reader's
   verdict (accepted or rejected) in manifest.json, with the dtype, shape and bytes of every tensor.
2. Runs the C++ gtest SafetensorsCorpus.AgreesWithTheOfficialReader (the test_safetensors binary
   built next to <attnlab-binary>), which opens every file with attnlab::SafetensorsFile, must reach
   the same verdict and read the same bytes, and rewrites the valid files with write_safetensors.
3. Loads every rewritten file with the official reader and checks dtypes, shapes, values, metadata.

Exits 0 on pass (or, with a SKIP line, when the `safetensors` package is not installed for this
interpreter), 1 on failure.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile


def log(msg):
    print(f"test_safetensors_official: {msg}", flush=True)


def official_verdict(path):
    """('ok', tensors) if the official reader accepts the file, else ('error', message)."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="np") as f:
            meta = f.metadata()
            keys = list(f.keys())
            tensors = {}
            for k in keys:
                s = f.get_slice(k)
                tensors[k] = {"dtype": s.get_dtype(), "shape": list(s.get_shape())}
                try:
                    tensors[k]["hex"] = f.get_tensor(k).tobytes().hex()
                except Exception:  # a dtype numpy cannot hold (BF16, F8): header facts only
                    tensors[k]["hex"] = None
        return "ok", (tensors, meta or {})
    except Exception as e:  # the official reader raises SafetensorError and friends
        return "error", f"{type(e).__name__}: {e}"


def valid_files(np):
    """Name -> (tensors, metadata), written with the official writer."""
    rng = np.random.default_rng(7)
    every_dtype = {}
    for dt, shape in [("bool", (3,)), ("uint8", (5,)), ("int8", (2, 3)), ("int16", (3,)), ("uint16", (1,)),
                      ("float16", (2, 2)), ("int32", (7,)), ("uint32", ()), ("float32", (3, 5)),
                      ("int64", ()), ("uint64", (2,)), ("float64", (2, 3, 4))]:
        if dt == "bool":
            a = rng.integers(0, 2, size=shape).astype(bool)
        elif dt.startswith("float"):
            a = rng.standard_normal(size=shape).astype(dt)
        else:
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        every_dtype[f"t_{dt}"] = a
    every_dtype["empty_f32"] = np.zeros((0, 7), np.float32)
    every_dtype["empty_u8"] = np.zeros((3, 0), np.uint8)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38], np.float32)
    model = {f"blocks.{i}.attn.qkv.weight": rng.standard_normal((4, 12)).astype(np.float32) for i in range(40)}
    model.update({f"blocks.{i}.ln1.bias": rng.standard_normal((4,)).astype(np.float32) for i in range(40)})
    return {
        "every_dtype": (every_dtype, {"format": "attnlab", "note": "h\u00e9llo \u2713", "config": '{"d": 4}', "empty": ""}),
        "specials": ({"special": special, "odd": np.arange(3, dtype=np.uint8), "wide": np.arange(3, dtype=np.float64)}, None),
        "unicode_names": ({"caf\u00e9.\u2603": np.ones((2,), np.float32), "a b\tc": np.zeros((1,), np.int32)}, {"\u00fc": "\u00e4"}),
        "model_like": (model, {"step": "12", "rng_state": "[1, 2, 3, 4]"}),
        "scalar_only": ({"step": np.array(7, np.int64)}, {}),
        "no_tensors": ({}, {"only": "metadata"}),
        "nothing": ({}, None),
    }


# Files the official reader accepts and attnlab refuses on purpose (docs/checkpoint-format.md).
DIFFERENCES = {
    "bad_duplicate_tensor.safetensors": "a tensor named twice: officially the last entry wins and the first "
                                        "one's bytes become an unexplained hole; attnlab refuses the file",
    "bad_sub_byte_dtype.safetensors": "sub-byte dtypes (F4, F6_*) are not supported by attnlab",
}


def write_raw(path, header, data=b"", length=None):
    h = header if isinstance(header, bytes) else header.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if length is None else length) + h + data)


def corrupt_files(d):
    """Hand-made files, one per validation rule; the official reader decides each verdict."""
    a = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    d8 = bytes(range(8))

    def hdr(**entries):
        return json.dumps(entries, separators=(",", ":"))

    cases = {
        "short": (None, b"abc"),
        "length_past_end": (hdr(a=a), d8, 1000),
        "length_absurd": ("{}", b"", 100_000_001),
        "not_json": ('{"a": ', b""),
        "array_header": ("[1,2]", b""),
        "trailing_garbage": (hdr(a=a) + "x", d8),
        "nul_after_json": (hdr(a=a).encode() + b"\0garbage", d8),
        "missing_dtype": (hdr(a={"shape": [2], "data_offsets": [0, 8]}), d8),
        "missing_shape": (hdr(a={"dtype": "F32", "data_offsets": [0, 8]}), d8),
        "missing_offsets": (hdr(a={"dtype": "F32", "shape": [2]}), d8),
        "dtype_number": (hdr(a={**a, "dtype": 4}), d8),
        "unknown_dtype": (hdr(a={**a, "dtype": "F31"}), d8),
        "shape_string": (hdr(a={**a, "shape": ["2"]}), d8),
        "shape_float": (hdr(a={**a, "shape": [2.0]}), d8),
        "negative_dim": (hdr(a={**a, "shape": [-2]}), d8),
        "two_negative_dims": (hdr(a={**a, "shape": [-1, -2]}), d8),
        "size_mismatch": (hdr(a={**a, "shape": [3]}), d8),
        "size_overflow": (hdr(a={**a, "shape": [4611686018427387904, 1], "data_offsets": [0, 0]}), b""),
        "offsets_one": (hdr(a={**a, "data_offsets": [8]}), d8),
        "offsets_negative": (hdr(a={**a, "data_offsets": [-8, 0]}), d8),
        "offsets_reversed": (hdr(a={**a, "shape": [0], "data_offsets": [8, 0]}), d8),
        "offsets_past_end": (hdr(a={**a, "shape": [4], "data_offsets": [0, 16]}), d8),
        "overlap": (hdr(a=a, b={**a, "data_offsets": [4, 12]}), d8 + d8[:4]),
        "gap": (hdr(a=a, b={**a, "shape": [1], "data_offsets": [12, 16]}), d8 + d8),
        "trailing_bytes": (hdr(a=a), d8 + b"xxxx"),
        "metadata_array": ('{"__metadata__":[1],"a":' + json.dumps(a) + "}", d8),
        "metadata_number_value": ('{"__metadata__":{"step":1},"a":' + json.dumps(a) + "}", d8),
        "metadata_null": ('{"__metadata__":null,"a":' + json.dumps(a) + "}", d8),
        "extra_field": (hdr(a={**a, "extra": [1, 2]}), d8),
        "unpadded_valid": (hdr(a=a), d8),
        "empty_inside_other": (hdr(a=a, e={**a, "shape": [0], "data_offsets": [4, 4]}), d8),
        "invalid_utf8_name": (b'{"\xff":' + json.dumps(a).encode() + b"}", d8),
        "leading_whitespace": (" \n" + hdr(a=a) + "\t", d8),
        "duplicate_metadata_key": ('{"__metadata__":{"k":"1","k":"2"},"a":' + json.dumps(a) + "}", d8),
        "duplicate_metadata": ('{"__metadata__":{},"__metadata__":{},"a":' + json.dumps(a) + "}", d8),
        "duplicate_field": ('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"dtype":"I32"}}', d8),
        "complex64": (hdr(a={**a, "dtype": "C64", "shape": [1]}), d8),
        "f8_e8m0": (hdr(a={**a, "dtype": "F8_E8M0", "shape": [8]}), d8),
        # Deliberate differences (see DIFFERENCES): the official reader accepts these, we refuse.
        "duplicate_tensor": ('{"a":' + json.dumps(a) + ',"a":' + json.dumps(a) + "}", d8),
        "sub_byte_dtype": (hdr(a={**a, "dtype": "F4", "shape": [16]}), d8),
    }
    out = []
    for name, spec in cases.items():
        path = os.path.join(d, f"bad_{name}.safetensors")
        if spec[0] is None:
            with open(path, "wb") as f:
                f.write(spec[1])
        else:
            write_raw(path, *spec)
        out.append((os.path.basename(path), f"hand-made: {name}"))
    return out


def mutate(data, rng):
    """1-3 random edits, mostly inside the header where the structure is."""
    m = bytearray(data)
    n = struct.unpack("<Q", data[:8])[0]
    interesting = b'{}[],:"0123456789-.eE \\u'
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        pos = 8 + rng.randrange(n) if r < 0.7 else rng.randrange(8) if r < 0.8 else rng.randrange(len(m))
        if pos >= len(m):
            continue
        op = rng.randrange(4)
        if op == 0:
            m[pos] = rng.randrange(256)
        elif op == 1:
            m[pos] = rng.choice(interesting)
        elif op == 2:
            del m[pos:pos + rng.randint(1, 4)]
        else:
            m.insert(pos, rng.choice(interesting))
    return bytes(m)


KNOWN_DTYPES = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
                "I64", "U64", "F64"]


def mutate_structure(data, rng):
    """One semantic edit of a valid file's header (a dimension, an offset, a dtype, an entry, the
    metadata, the data length): the JSON stays valid, so the deeper validation rules are exercised."""
    n = struct.unpack("<Q", data[:8])[0]
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    op = rng.randrange(9)
    if names and op == 0:
        t = header[rng.choice(names)]
        if t["shape"]:
            i = rng.randrange(len(t["shape"]))
            t["shape"][i] = max(0, t["shape"][i] + rng.choice([-1, 1, 2, -2])) if rng.random() < 0.8 else rng.choice([0, 1, 2**31, 2**62])
        else:
            t["shape"] = [rng.choice([0, 1, 2])]
    elif names and op == 1:
        t = header[rng.choice(names)]
        i = rng.randrange(2)
        t["data_offsets"][i] = max(0, t["data_offsets"][i] + rng.choice([-8, -4, -1, 1, 4, 8]))
    elif names and op == 2:
        header[rng.choice(names)]["dtype"] = rng.choice(KNOWN_DTYPES)
    elif len(names) >= 2 and op == 3:
        x, y = rng.sample(names, 2)
        header[x]["data_offsets"], header[y]["data_offsets"] = header[y]["data_offsets"], header[x]["data_offsets"]
    elif names and op == 4:
        del header[rng.choice(names)]
    elif op == 5:
        header["__metadata__"] = rng.choice([None, {}, {"k": 1}, {"k": "v"}, [], "x", {"k": None}])
    elif op == 6:
        body = body + bytes(rng.randrange(1, 9))
    elif op == 7 and body:
        body = body[:-rng.randrange(1, min(8, len(body)) + 1)]
    elif names:
        t = header[rng.choice(names)]
        t[rng.choice(["dtype", "shape", "data_offsets"])] = rng.choice([None, 1, "F32", [], [0], [0, 0, 0], {}])
    h = json.dumps(header, separators=(",", ":")).encode()
    if rng.random() < 0.5:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body


def main():
    if len(sys.argv) < 3:
        print("usage: test_safetensors_official.py <attnlab-binary> <source-dir>")
        return 1
    attnlab_bin = os.path.abspath(sys.argv[1])
    try:
        import numpy as np
        from safetensors import safe_open
        from safetensors.numpy import load_file, save_file
    except ImportError as e:
        log(f"SKIP: the official safetensors package is not importable by {sys.executable} ({e}); "
            f"install it with: {sys.executable} -m pip install --break-system-packages safetensors")
        return 0
    import safetensors

    test_bin = os.path.join(os.path.dirname(attnlab_bin), "test_safetensors")
    if not os.access(test_bin, os.X_OK):
        log(f"FAIL: {test_bin} not found; build the test_safetensors target next to {attnlab_bin}")
        return 1

    scratch = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # thousands of small files
    with tempfile.TemporaryDirectory(prefix="attnlab_st_corpus_", dir=scratch) as d:
        os.mkdir(os.path.join(d, "rewritten"))
        entries = []  # (file, what, rewrite?)
        originals = {}
        for name, (tensors, meta) in valid_files(np).items():
            fname = f"valid_{name}.safetensors"
            save_file(tensors, os.path.join(d, fname), metadata=meta)
            originals[fname] = (tensors, meta or {})
            entries.append((fname, f"official writer: {name}", True))
        entries += [(f, what, False) for f, what in corrupt_files(d)]

        rng = random.Random(20240611)
        bases = [f for f, _, _ in entries if f.startswith("valid_")]
        for i in range(1500):
            base = bases[i % len(bases)]
            with open(os.path.join(d, base), "rb") as f:
                data = f.read()
            fname = f"mut_{i:04d}.safetensors"
            with open(os.path.join(d, fname), "wb") as f:
                f.write(mutate(data, rng))
            entries.append((fname, f"random byte mutation of {base}", False))
        for i in range(1500):
            base = bases[i % len(bases)]
            with open(os.path.join(d, base), "rb") as f:
                data = f.read()
            fname = f"struct_{i:04d}.safetensors"
            with open(os.path.join(d, fname), "wb") as f:
                f.write(mutate_structure(data, rng))
            entries.append((fname, f"random header edit of {base}", False))

        cases = []
        for fname, what, rewrite in entries:
            verdict, detail = official_verdict(os.path.join(d, fname))
            case = {"file": fname, "what": what, "official": verdict}
            if fname in DIFFERENCES:
                if verdict != "ok":
                    log(f"FAIL: expected the official reader to accept {fname} ({DIFFERENCES[fname]}): {detail}")
                    return 1
                case["ours"] = "error"
                case["what"] += " (deliberate difference: " + DIFFERENCES[fname] + ")"
            if verdict == "ok":
                tensors, meta = detail
                if all(t["hex"] is not None for t in tensors.values()):
                    case["tensors"] = tensors
                    case["metadata"] = meta
                    if rewrite:
                        case["rewrite"] = "rewritten/" + fname
            else:
                case["official_error"] = detail
            if rewrite and verdict != "ok":
                log(f"FAIL: the official reader rejects its own file {fname}: {detail}")
                return 1
            cases.append(case)
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump({"cases": cases}, f)
        n_ok = sum(c["official"] == "ok" for c in cases)
        log(f"corpus: {len(cases)} files ({n_ok} accepted and {len(cases) - n_ok} rejected by safetensors "
            f"{safetensors.__version__})")

        env = dict(os.environ, ATTNLAB_ST_CORPUS=d)
        run = subprocess.run([test_bin, "--gtest_filter=SafetensorsCorpus.*"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ran = "corpus:" in run.stdout and "[  PASSED  ] 1 test" in run.stdout
        if run.returncode != 0 or not ran:
            print(run.stdout[-20000:])
            log(f"FAIL: attnlab's reader disagrees with the official one (see above; exit {run.returncode})")
            return 1
        log(next(line for line in run.stdout.splitlines() if "corpus:" in line).strip("[ ]"))

        # Our writer -> official reader.
        n_rewritten = 0
        for c in cases:
            if "rewrite" not in c:
                continue
            path = os.path.join(d, c["rewrite"])
            want, want_meta = originals[c["file"]]
            got = load_file(path)
            with safe_open(path, framework="np") as f:
                got_meta = f.metadata() or {}
            with open(path, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
            problems = []
            if n % 8:
                problems.append(f"header length {n} is not a multiple of 8")
            if sorted(got) != sorted(want):
                problems.append(f"names {sorted(got)} != {sorted(want)}")
            for k in want:
                if k in got and (got[k].dtype != want[k].dtype or got[k].shape != want[k].shape
                                 or got[k].tobytes() != want[k].tobytes()):
                    problems.append(f"tensor {k!r}: {got[k].dtype}{got[k].shape} != {want[k].dtype}{want[k].shape} or bytes differ")
            if got_meta != want_meta:
                problems.append(f"metadata {got_meta} != {want_meta}")
            if problems:
                log(f"FAIL: {c['rewrite']} written by attnlab: " + "; ".join(problems))
                return 1
            n_rewritten += 1
        if n_rewritten != len(originals):
            log(f"FAIL: only {n_rewritten} of {len(originals)} valid files were rewritten by attnlab")
            return 1
    log(f"PASS: attnlab agrees with the official reader on all {len(cases)} files (but for the "
        f"{len(DIFFERENCES)} deliberate differences), and the official reader reads back all {n_rewritten} "
        f"files attnlab rewrote, bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
