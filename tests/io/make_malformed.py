#!/usr/bin/python3
"""Generate the malformed safetensors corpus (tests/io/malformed/), its manifest
EXPECTED.tsv (file, expected status, message fragment), and the valid seed files
(tests/io/valid/ and fuzz/corpus/safetensors/).

Run from anywhere with Debian's python:  /usr/bin/python3 tests/io/make_malformed.py
The outputs are committed; the C suite (test_safetensors.c) opens each file and
asserts the status and that the last-error message contains the fragment.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MAL = os.path.join(HERE, "malformed")
VALID = os.path.join(HERE, "valid")
FUZZ = os.path.join(ROOT, "fuzz", "corpus", "safetensors")


def st(header, data=b"", n=None, pad=True):
    """A file: 8-byte little-endian length, header bytes, data.  pad: pad the
    header with spaces to a multiple of 8 (as writers do)."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header = header + b" " * ((-len(header)) % 8)
    if n is None:
        n = len(header)
    return struct.pack("<Q", n) + header + data


F8 = struct.pack("<2f", 1.5, -2.0)          # 8 bytes of F32 data
W = '"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'


def entry(dtype='"F32"', shape="[2]", offs="[0,8]", extra="", name="w"):
    return '"%s":{"dtype":%s,"shape":%s,"data_offsets":%s%s}' % (name, dtype, shape, offs, extra)


CASES = []


def case(name, data, status, fragment):
    CASES.append((name, data, status, fragment))


# ---- the 8-byte length prefix ------------------------------------------------
case("empty", b"", "PT_EFORMAT", "file is empty")
case("short_4_bytes", b"\x02\x00\x00\x00", "PT_EFORMAT", "shorter than the 8-byte header length")
case("short_7_bytes", b"\x02\x00\x00\x00\x00\x00\x00", "PT_EFORMAT", "shorter than the 8-byte")
case("len_zero", struct.pack("<Q", 0), "PT_EFORMAT", "header length 0 is too small")
case("len_one", struct.pack("<Q", 1) + b"{", "PT_EFORMAT", "header length 1 is too small")
case("len_huge", struct.pack("<Q", 2**63) + b"{}      ", "PT_ERANGE", "exceeds the limit of 100000000")
case("len_all_ones", b"\xff" * 8 + b"{}      ", "PT_ERANGE", "exceeds the limit")
case("len_over_limit_by_one", struct.pack("<Q", 100000001) + b"{}      ", "PT_ERANGE",
     "header length 100000001 exceeds the limit")
case("len_past_eof", st("{}", n=1000), "PT_EFORMAT", "header length 1000 points past the end of the file")
case("len_past_eof_by_one", struct.pack("<Q", 9) + b"{}      ", "PT_EFORMAT", "points past the end")

# ---- header bytes: strict JSON, UTF-8 ------------------------------------------
case("header_array", st("[]"), "PT_EFORMAT", "does not start with '{'")
case("header_string", st('"abc"'), "PT_EFORMAT", "does not start with '{'")
case("header_leading_space", st(" {}"), "PT_EFORMAT", "does not start with '{'")
case("header_number", st("12"), "PT_EFORMAT", "does not start with '{'")
case("header_not_closed", st('{"w":{"dtype":"F32"', pad=False), "PT_EFORMAT", "object is not closed")
case("header_unterminated_string", st('{"w', pad=False), "PT_EFORMAT", "unterminated string")
case("header_syntax_error", st('{"w" 1}'), "PT_EFORMAT", "header is not valid JSON")
case("header_trailing_comma", st('{%s,}' % W, F8), "PT_EFORMAT", "header is not valid JSON")
case("header_nan_literal", st('{"w":{"dtype":"F32","shape":[NaN],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "header is not valid JSON")
case("header_trailing_garbage", st("{}x", pad=False), "PT_EFORMAT", "trailing byte 0x78")
case("header_trailing_newline", st("{}\n", pad=False), "PT_EFORMAT", "trailing byte 0x0a")
case("header_trailing_nul", st("{}\x00", pad=False), "PT_EFORMAT", "trailing byte 0x00")
case("header_two_objects", st("{}{}"), "PT_EFORMAT", "trailing byte 0x7b")
case("header_extra_close", st("{}}"), "PT_EFORMAT", "trailing byte 0x7d")
case("utf8_invalid_byte", st(b'{"\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "not valid UTF-8 at offset 2")
case("utf8_overlong", st(b'{"\xc0\xaf":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "not valid UTF-8")
case("utf8_surrogate", st(b'{"\xed\xa0\x80":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "not valid UTF-8")
case("utf8_above_max", st(b'{"\xf4\x90\x80\x80":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "not valid UTF-8")
case("utf8_truncated", st(b'{"\xe2\x82":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "not valid UTF-8")
case("string_raw_control", st('{"a\x01b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "raw control character 0x01")
case("string_raw_newline", st('{"__metadata__":{"k":"a\nb"}}'), "PT_EFORMAT", "raw control character 0x0a")
case("string_nul_escape", st('{"a\\u0000b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "\\u0000")
case("string_lone_surrogate", st('{"\\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8),
     "PT_EFORMAT", "header is not valid JSON")
case("control_outside_string", st('{\x01%s}' % W, F8), "PT_EFORMAT", "control character 0x01 at offset 1")
case("deep_nesting", st('{"__metadata__":' + "[" * 2000 + "]" * 2000 + "}"), "PT_EFORMAT",
     "header is not valid JSON")

# ---- entries ------------------------------------------------------------------
case("entry_number", st('{"w":5}'), "PT_EFORMAT", "tensor 'w': entry is not a JSON object")
case("entry_array", st('{"w":[]}'), "PT_EFORMAT", "tensor 'w': entry is not a JSON object")
case("entry_missing_dtype", st('{"w":{"shape":[2],"data_offsets":[0,8]}}', F8), "PT_EFORMAT",
     "tensor 'w': missing \"dtype\"")
case("entry_missing_shape", st('{"w":{"dtype":"F32","data_offsets":[0,8]}}', F8), "PT_EFORMAT",
     "tensor 'w': missing \"shape\"")
case("entry_missing_offsets", st('{"w":{"dtype":"F32","shape":[2]}}', F8), "PT_EFORMAT",
     "tensor 'w': missing \"data_offsets\"")
case("entry_unknown_key", st("{%s}" % entry(extra=',"foo":1'), F8), "PT_EFORMAT",
     "tensor 'w': unknown key 'foo' in entry")
case("entry_duplicate_key", st("{%s}" % entry(extra=',"dtype":"F32"'), F8), "PT_EFORMAT",
     "tensor 'w': duplicate key 'dtype' in entry")
case("dtype_number", st("{%s}" % entry(dtype="1"), F8), "PT_EFORMAT", "tensor 'w': dtype is not a string")
case("dtype_unknown", st("{%s}" % entry(dtype='"F17"'), F8), "PT_EFORMAT", "tensor 'w': unknown dtype 'F17'")
case("dtype_lowercase", st("{%s}" % entry(dtype='"f32"'), F8), "PT_EFORMAT", "tensor 'w': unknown dtype 'f32'")
case("dtype_empty", st("{%s}" % entry(dtype='""'), F8), "PT_EFORMAT", "tensor 'w': unknown dtype ''")
case("shape_number", st("{%s}" % entry(shape="2"), F8), "PT_EFORMAT", "tensor 'w': shape is not an array")
case("shape_null", st("{%s}" % entry(shape="null"), F8), "PT_EFORMAT", "tensor 'w': shape is not an array")
case("shape_string_element", st("{%s}" % entry(shape='["2"]'), F8), "PT_EFORMAT",
     "tensor 'w': shape[0] is not a number")
case("shape_negative", st("{%s}" % entry(shape="[-2]"), F8), "PT_EFORMAT", "tensor 'w': shape[0] is negative")
case("shape_fraction", st("{%s}" % entry(shape="[2.0]"), F8), "PT_EFORMAT",
     "tensor 'w': shape[0] is not an integer")
case("shape_exponent", st("{%s}" % entry(shape="[2e0]"), F8), "PT_EFORMAT",
     "tensor 'w': shape[0] is not an integer")
case("shape_leading_zero", st("{%s}" % entry(shape="[02]"), F8), "PT_EFORMAT",
     "tensor 'w': shape[0] has a leading zero")
case("shape_2pow53_plus1", st("{%s}" % entry(shape="[1,9007199254740993]"), F8), "PT_ERANGE",
     "tensor 'w': shape[1] exceeds 2^53")
case("shape_20_digits", st("{%s}" % entry(shape="[100000000000000000000]"), F8), "PT_ERANGE",
     "tensor 'w': shape[0] exceeds 2^53")
case("shape_product_overflow", st("{%s}" % entry(shape="[67108864,67108864,67108864]"), F8), "PT_ERANGE",
     "tensor 'w': shape product overflows")
case("shape_rank_9", st("{%s}" % entry(shape="[1,1,1,1,1,1,1,2,1]"), F8), "PT_EUNSUPPORTED",
     "tensor 'w': rank 9 exceeds")
case("numel_over_2pow53", st("{%s}" % entry(dtype='"F64"', shape="[4503599627370496,4]"), F8), "PT_ERANGE",
     "tensor 'w': shape product overflows")
case("offsets_number", st("{%s}" % entry(offs="0"), F8), "PT_EFORMAT",
     "tensor 'w': data_offsets is not an array")
case("offsets_one", st("{%s}" % entry(offs="[8]"), F8), "PT_EFORMAT",
     "tensor 'w': data_offsets must have exactly 2 elements, has 1")
case("offsets_three", st("{%s}" % entry(offs="[0,8,8]"), F8), "PT_EFORMAT",
     "data_offsets must have exactly 2 elements, has 3")
case("offsets_reversed", st("{%s}" % entry(offs="[8,0]"), F8), "PT_EFORMAT",
     "tensor 'w': data_offsets [8, 0] end before they begin")
case("offsets_negative", st("{%s}" % entry(offs="[-8,0]"), F8), "PT_EFORMAT",
     "tensor 'w': data_offsets[0] is negative")
case("offsets_fraction", st("{%s}" % entry(offs="[0,8.5]"), F8), "PT_EFORMAT",
     "tensor 'w': data_offsets[1] is not an integer")
case("offsets_string", st("{%s}" % entry(offs='[0,"8"]'), F8), "PT_EFORMAT",
     "tensor 'w': data_offsets[1] is not a number")
case("offsets_too_large", st("{%s}" % entry(offs="[0,18446744073709551616]"), F8), "PT_ERANGE",
     "tensor 'w': data_offsets[1] exceeds 2^53")

# ---- sizes and layout -------------------------------------------------------------
case("size_mismatch_short", st("{%s}" % entry(shape="[3]"), F8), "PT_EFORMAT",
     "tensor 'w': shape x dtype size is 12 bytes but data_offsets [0, 8] span 8 bytes")
case("size_mismatch_dtype", st("{%s}" % entry(dtype='"F16"'), F8), "PT_EFORMAT",
     "tensor 'w': shape x dtype size is 4 bytes")
case("size_scalar_mismatch", st("{%s}" % entry(shape="[]"), F8), "PT_EFORMAT",
     "tensor 'w': shape x dtype size is 4 bytes")
case("f4_partial_byte", st("{%s}" % entry(dtype='"F4"', shape="[3]", offs="[0,2]"), b"\0\0"), "PT_EFORMAT",
     "tensor 'w': 3 elements of F4 do not fill whole bytes")
case("gap_at_start", st("{%s}" % entry(shape="[1]", offs="[4,8]"), F8), "PT_EFORMAT",
     "tensor 'w': data_offsets begin at 4, leaving a gap after 0")
case("gap_between",
     st("{%s,%s}" % (entry(name="a", shape="[1]", offs="[0,4]"), entry(name="b", shape="[1]", offs="[8,12]")),
        F8 + b"\0" * 4), "PT_EFORMAT", "tensor 'b': data_offsets begin at 8, leaving a gap after 4")
case("overlap",
     st("{%s,%s}" % (entry(name="a", shape="[2]", offs="[0,8]"), entry(name="b", shape="[2]", offs="[4,12]")),
        F8 + b"\0" * 4), "PT_EFORMAT", "tensor 'b': data_offsets begin at 4, overlapping")
case("same_region",
     st("{%s,%s}" % (entry(name="a"), entry(name="b")), F8), "PT_EFORMAT",
     "tensor 'b': data_offsets begin at 0, overlapping")
case("data_past_eof", st("{%s}" % entry(), F8[:4]), "PT_EFORMAT",
     "tensor 'w': data_offsets end at 8, past the end of the data area (4 bytes)")
case("data_trailing", st("{%s}" % entry(), F8 + b"\0\0\0\0"), "PT_EFORMAT",
     "tensor data ends at 8 but the data area is 12 bytes")
case("no_tensors_with_data", st("{}", F8), "PT_EFORMAT", "tensor data ends at 0 but the data area is 8 bytes")
case("duplicate_name", st("{%s,%s}" % (entry(shape="[1]", offs="[0,4]"), entry(shape="[1]", offs="[4,8]")), F8),
     "PT_EFORMAT", "duplicate tensor name 'w'")
case("duplicate_escaped_name",
     st('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"\\u0077":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', F8),
     "PT_EFORMAT", "duplicate tensor name 'w'")

# ---- __metadata__ ------------------------------------------------------------------
case("metadata_string", st('{"__metadata__":"pt"}'), "PT_EFORMAT", "__metadata__ is not a JSON object")
case("metadata_array", st('{"__metadata__":["format","pt"]}'), "PT_EFORMAT", "__metadata__ is not a JSON object")
case("metadata_number_value", st('{"__metadata__":{"format":1}}'), "PT_EFORMAT",
     "__metadata__ value for key 'format' is not a string")
case("metadata_null_value", st('{"__metadata__":{"format":null}}'), "PT_EFORMAT",
     "__metadata__ value for key 'format' is not a string")
case("metadata_object_value", st('{"__metadata__":{"format":{}}}'), "PT_EFORMAT",
     "__metadata__ value for key 'format' is not a string")
case("metadata_duplicate_key", st('{"__metadata__":{"format":"pt","format":"np"}}'), "PT_EFORMAT",
     "__metadata__ has duplicate key 'format'")
case("metadata_twice", st('{"__metadata__":{},"__metadata__":{}}'), "PT_EFORMAT",
     "duplicate key '__metadata__'")


# ---- valid files (seeds for the fuzzer; loaded by the C suite) ---------------------
def valid_files():
    out = {}
    out["empty_object"] = st("{}")
    out["one_f32"] = st('{"__metadata__":{"format":"pt"},%s}' % W, F8)
    f16 = struct.pack("<4H", 0x3C00, 0xC000, 0x0001, 0x7C00)   # 1, -2, 2^-24, inf
    bf16 = struct.pack("<2H", 0x3F80, 0xBF80)                  # 1, -1
    hdr = ('{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},'
           '"b":{"dtype":"F16","shape":[2,2],"data_offsets":[4,12]},'
           '"c":{"dtype":"I64","shape":[],"data_offsets":[12,20]},'
           '"d":{"dtype":"U8","shape":[0,3],"data_offsets":[20,20]},'
           '"e":{"dtype":"F4","shape":[4],"data_offsets":[20,22]}}')
    out["mixed"] = st(hdr, bf16 + f16 + struct.pack("<q", -7) + b"\x12\x34")
    # unpadded header, keys in another order, tensors listed out of offset order
    hdr = ('{"z":{"data_offsets":[0,4],"shape":[1],"dtype":"F32"},'
           '"y":{"shape":[1],"dtype":"I32","data_offsets":[4,8]}}')
    out["unpadded"] = st(hdr, struct.pack("<fi", 3.0, 5), pad=False)
    # more metadata keys than top-level members; escapes and UTF-8 in names and values
    out["metadata_only"] = st('{"__metadata__":{"a":"1","b":"2","c":"\\u00e9\\n","\u00e9":"x"}}')
    return out


def main():
    for d in (MAL, VALID):
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
    os.makedirs(FUZZ, exist_ok=True)
    names = set()
    with open(os.path.join(MAL, "EXPECTED.tsv"), "w") as tsv:
        tsv.write("# file\tstatus\tmessage fragment (generated by tests/io/make_malformed.py)\n")
        for name, data, status, frag in CASES:
            assert name not in names, name
            names.add(name)
            assert "\t" not in frag and "\n" not in frag
            with open(os.path.join(MAL, name + ".safetensors"), "wb") as f:
                f.write(data)
            tsv.write("%s.safetensors\t%s\t%s\n" % (name, status, frag))
    for name, data in valid_files().items():
        for d in (VALID, FUZZ):
            with open(os.path.join(d, name + ".safetensors"), "wb") as f:
                f.write(data)
    print("%d malformed files, %d valid files" % (len(CASES), len(valid_files())))


if __name__ == "__main__":
    main()
