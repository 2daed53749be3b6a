#!/usr/bin/python3
"""Generate the malformed GGUF corpus (tests/io/gguf_malformed/*.gguf), its
manifest EXPECTED.tsv (file, expected status, message fragment), and a few
valid files the writer does not produce (tests/io/gguf_valid/: version 2,
general.alignment 64, a quantised tensor, no tensors and no padding).

Python 3 standard library only.  Run from anywhere:
    python3 tests/io/make_gguf_malformed.py
The outputs are committed; test_gguf.c opens each file and asserts the
status, that the last-error message contains the fragment, and that it
names the file.  One file per rule.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAL = os.path.join(HERE, "gguf_malformed")
VALID = os.path.join(HERE, "gguf_valid")

# value types (the format's numbers)
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
# ggml types
G_F32, G_F16, G_Q4_K, G_BF16 = 0, 1, 12, 30


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def gstr(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return u64(len(b)) + b


def kv(key, vtype, payload):
    """A pair: key, value type, raw payload bytes."""
    return gstr(key) + u32(vtype) + payload


def kv_u32(key, v):
    return kv(key, U32, u32(v))


def kv_str(key, s):
    return kv(key, STR, gstr(s))


def arr(elem, count, body):
    return u32(elem) + u64(count) + body


def tinfo(name, ne, gtype=G_F32, offset=0):
    return gstr(name) + u32(len(ne)) + b"".join(u64(n) for n in ne) + u32(gtype) + u64(offset)


def gguf(kvs=(), tensors=(), data=b"", version=3, magic=b"GGUF", n_t=None, n_kv=None,
         align=32, pad=True):
    """A file: header, the pairs, the tensor infos, padding to `align`, data."""
    kvs, tensors = list(kvs), list(tensors)
    h = magic + u32(version)
    h += u64(len(tensors) if n_t is None else n_t)
    h += u64(len(kvs) if n_kv is None else n_kv)
    h += b"".join(kvs) + b"".join(tensors)
    if pad:
        h += b"\0" * ((-len(h)) % align)
    return h + data


F32x8 = struct.pack("<8f", *range(8))      # 32 bytes: one 8-element F32 tensor
W = "blk.0.attn_q.weight"

CASES = []


def case(name, data, status, fragment):
    CASES.append((name + ".gguf", data, status, fragment))


# ---- the fixed header --------------------------------------------------------
case("empty", b"", "PT_EFORMAT", "truncated at byte 0: the magic needs 4 bytes")
case("bad_magic", gguf(magic=b"GGUX"), "PT_EFORMAT", "bad magic 47 47 55 58")
case("bad_magic_ggml", b"lmgg" + b"\0" * 20, "PT_EFORMAT", "not a GGUF file")
case("version_1", gguf(version=1), "PT_EUNSUPPORTED", "GGUF version 1 is not supported")
case("version_4", gguf(version=4), "PT_EUNSUPPORTED", "GGUF version 4 is not supported")
case("version_big_endian", gguf(version=0x03000000), "PT_EUNSUPPORTED", "big-endian")
case("truncated_version", b"GGUF\x03\x00", "PT_EFORMAT", "truncated at byte 4: the version needs 4 bytes, 2 left")
case("truncated_tensor_count", b"GGUF" + u32(3) + b"\0" * 5, "PT_EFORMAT",
     "truncated at byte 8: tensor count needs 8 bytes, 5 left")
case("truncated_kv_count", b"GGUF" + u32(3) + u64(0) + b"\0" * 7, "PT_EFORMAT",
     "truncated at byte 16: metadata count needs 8 bytes, 7 left")
case("truncated_key", gguf([gstr("general.name")[:14]], pad=False), "PT_EFORMAT",
     "key needs 12 bytes, 6 left")
case("truncated_value_type", gguf([gstr("abcdefghij") + b"\x04\x00"], pad=False), "PT_EFORMAT",
     "key 'abcdefghij': truncated at byte 42: the value type needs 4 bytes, 2 left")
case("truncated_value", gguf([gstr("a") + u32(U64) + b"\1\2\3"], pad=False), "PT_EFORMAT",
     "key 'a': truncated at byte 37: the value needs 8 bytes, 3 left")
case("truncated_tensor_info", gguf(tensors=[tinfo(W, [8, 4])[:-20]], pad=False), "PT_EFORMAT",
     "tensor 'blk.0.attn_q.weight': truncated at byte 63: ne[1] needs 8 bytes, 0 left")

# ---- counts against the bytes left -------------------------------------------
case("kv_count_past_eof", gguf([kv_u32("a", 1)], n_kv=1000), "PT_EFORMAT",
     "metadata count 1000 cannot fit in the")
case("kv_count_huge", gguf(n_kv=2**64 - 1), "PT_ERANGE",
     "metadata count 18446744073709551615 exceeds the limit of 1048576")
case("tensor_count_past_eof", gguf(n_t=1000), "PT_EFORMAT", "tensor count 1000 cannot fit in the")
case("tensor_count_huge", gguf(n_t=2**63), "PT_ERANGE", "tensor count 9223372036854775808 exceeds the limit")
case("counts_together_past_eof", gguf([kv_u32("a", 1)], n_kv=3, n_t=2, pad=False) + b"\0" * 60,
     "PT_EFORMAT", "3 pairs and 2 tensors cannot fit")

# ---- strings and arrays ------------------------------------------------------
case("string_len_max", gguf([kv("a", STR, u64(2**64 - 1) + b"xyz")]), "PT_ERANGE",
     "key 'a': a string value: length 18446744073709551615 exceeds the limit of 1073741824 bytes")
case("string_len_past_eof", gguf([kv("a", STR, u64(1000) + b"xyz")], pad=False), "PT_EFORMAT",
     "a string value needs 1000 bytes, 3 left")
case("key_len_max", gguf([u64(2**64 - 1) + b"abc" + b"\0" * 8], pad=False), "PT_ERANGE",
     "metadata pair 0: key: length 18446744073709551615 exceeds the limit of 65535")
case("array_count_overflow", gguf([kv("a", ARR, arr(U64, 2**61 + 1, u64(7)))]), "PT_ERANGE",
     "key 'a': array of 2305843009213693953 elements exceeds the limit of 268435456")
case("array_count_past_eof", gguf([kv("a", ARR, arr(U32, 1000, u32(7)))]), "PT_EFORMAT",
     "key 'a': array of 1000 uint32 values cannot fit in the")
case("string_array_past_eof", gguf([kv("a", ARR, arr(STR, 2**20, gstr("x")))]), "PT_EFORMAT",
     "array of 1048576 string values cannot fit")
case("string_array_element_past_eof",
     gguf([kv("a", ARR, arr(STR, 3, gstr("x") + gstr("y") + u64(99) + b"zz"))], pad=False),
     "PT_EFORMAT", "key 'a': element 2: truncated")
case("nested_array", gguf([kv("a", ARR, arr(ARR, 1, arr(U8, 1, b"\1")))]), "PT_EFORMAT",
     "key 'a': nested arrays are not allowed")
case("unknown_value_type", gguf([kv("a", 13, u32(0))]), "PT_EFORMAT", "key 'a': unknown value type 13")
case("unknown_elem_type", gguf([kv("a", ARR, arr(99, 1, b"\0" * 8))]), "PT_EFORMAT",
     "key 'a': unknown value type 99")
case("bool_value_2", gguf([kv("a", BOOL, b"\x02")]), "PT_EFORMAT", "key 'a': bool value 2")
case("bool_array_value_255", gguf([kv("a", ARR, arr(BOOL, 3, b"\1\0\xff"))]), "PT_EFORMAT",
     "bool value 255 at byte")

# ---- keys --------------------------------------------------------------------
case("duplicate_key", gguf([kv_u32("general.x", 1), kv_str("b", "v"), kv_u32("general.x", 2)]),
     "PT_EFORMAT", "duplicate key 'general.x'")
case("key_not_utf8", gguf([kv(b"a\xffb", U32, u32(1))]), "PT_EFORMAT", "key at byte 24 is not valid UTF-8")
case("key_overlong_utf8", gguf([kv(b"\xc0\xaf", U32, u32(1))]), "PT_EFORMAT", "not valid UTF-8")
case("key_surrogate", gguf([kv(b"\xed\xa0\x80", U32, u32(1))]), "PT_EFORMAT", "not valid UTF-8")
case("key_with_nul", gguf([kv(b"a\0b", U32, u32(1))]), "PT_EFORMAT", "metadata pair 0: key at byte 24 contains a NUL byte (byte 1 of it)")
case("empty_key", gguf([kv(b"", U32, u32(1))]), "PT_EFORMAT", "metadata pair 0: key at byte 24 is empty")

# ---- general.alignment -------------------------------------------------------
case("alignment_0", gguf([kv_u32("general.alignment", 0)]), "PT_EFORMAT",
     "general.alignment 0 is not a nonzero power of two")
case("alignment_3", gguf([kv_u32("general.alignment", 3)]), "PT_EFORMAT",
     "general.alignment 3 is not a nonzero power of two")
case("alignment_string", gguf([kv_str("general.alignment", "32")]), "PT_EFORMAT",
     "general.alignment: expected uint32, found string")
case("alignment_u64", gguf([kv("general.alignment", U64, u64(32))]), "PT_EFORMAT",
     "general.alignment: expected uint32, found uint64")
case("alignment_64_offset_32",
     gguf([kv_u32("general.alignment", 64)], [tinfo("a", [8]), tinfo("b", [8], offset=32)],
          F32x8 * 4, align=64),
     "PT_EFORMAT", "tensor 'b': offset 32 is not a multiple of the alignment 64")

# ---- tensor infos ------------------------------------------------------------
case("n_dims_0", gguf(tensors=[tinfo(W, [])], data=F32x8), "PT_EFORMAT",
     "tensor 'blk.0.attn_q.weight': n_dims 0 is not in 1..4")
case("n_dims_5", gguf(tensors=[tinfo(W, [1, 1, 1, 1, 8])], data=F32x8), "PT_EFORMAT",
     "n_dims 5 is not in 1..4")
case("ne_0", gguf(tensors=[tinfo(W, [8, 0])], data=F32x8), "PT_EFORMAT", "tensor 'blk.0.attn_q.weight': ne[1] is 0")
case("ne_product_overflow", gguf(tensors=[tinfo(W, [2**32, 2**32, 16])], data=F32x8), "PT_EFORMAT",
     "the element count overflows (ne[1] = 4294967296)")
case("ne_over_int64", gguf(tensors=[tinfo(W, [2**63])], data=F32x8), "PT_EFORMAT",
     "the element count overflows (ne[0] = 9223372036854775808)")
case("nbytes_overflow", gguf(tensors=[tinfo(W, [2**31, 2**31])], data=F32x8), "PT_EFORMAT",
     "the byte size overflows")
case("unknown_ggml_type", gguf(tensors=[tinfo(W, [8], gtype=99)], data=F32x8), "PT_EFORMAT",
     "tensor 'blk.0.attn_q.weight': unknown ggml type 99")
case("removed_ggml_type", gguf(tensors=[tinfo(W, [8], gtype=31)], data=F32x8), "PT_EFORMAT",
     "unknown ggml type 31")
case("ggml_type_end", gguf(tensors=[tinfo(W, [8], gtype=40)], data=F32x8), "PT_EFORMAT",
     "unknown ggml type 40")
case("block_mismatch", gguf(tensors=[tinfo(W, [100], gtype=G_Q4_K)], data=b"\0" * 160), "PT_EFORMAT",
     "ne[0] = 100 is not a multiple of the Q4_K block size 256")
case("tensor_name_empty", gguf(tensors=[tinfo("", [8])], data=F32x8), "PT_EFORMAT",
     "tensor 0: tensor name at byte 24 is empty")
case("tensor_name_not_utf8", gguf(tensors=[tinfo(b"w\x80", [8])], data=F32x8), "PT_EFORMAT",
     "tensor 0: tensor name at byte 24 is not valid UTF-8")
case("tensor_name_len_max", gguf(tensors=[u64(2**40) + b"abc"], pad=False) + b"\0" * 40, "PT_ERANGE",
     "tensor 0: tensor name: length 1099511627776 exceeds the limit of 65535")
case("duplicate_tensor_name", gguf(tensors=[tinfo(W, [8]), tinfo(W, [8], offset=32)], data=F32x8 * 2),
     "PT_EFORMAT", "duplicate tensor name 'blk.0.attn_q.weight'")

# ---- the data section --------------------------------------------------------
case("misaligned_offset", gguf(tensors=[tinfo(W, [8], offset=100)], data=F32x8 * 5), "PT_EFORMAT",
     "tensor 'blk.0.attn_q.weight': offset 100 is not a multiple of the alignment 32")
case("offset_past_data", gguf(tensors=[tinfo(W, [8], offset=64)], data=F32x8), "PT_EFORMAT",
     "tensor 'blk.0.attn_q.weight': bytes [64, +32) run past the end of the data section (32 bytes)")
case("offset_huge", gguf(tensors=[tinfo(W, [8], offset=2**64 - 32)], data=F32x8), "PT_EFORMAT",
     "run past the end of the data section")
case("data_truncated", gguf(tensors=[tinfo(W, [8])], data=F32x8[:31]), "PT_EFORMAT",
     "bytes [0, +32) run past the end of the data section (31 bytes)")
case("data_start_past_eof", gguf(tensors=[tinfo(W, [8])], pad=False), "PT_EFORMAT",
     "the data section would start at byte 96, past the end of the file (75 bytes)")
case("overlapping_tensors",
     gguf(tensors=[tinfo("a", [16]), tinfo("b", [8], offset=32)], data=F32x8 * 2), "PT_EFORMAT",
     "tensors 'a' (bytes 0..64) and 'b' (from byte 32) overlap")
case("overlapping_same_offset",
     gguf(tensors=[tinfo("a", [8]), tinfo("b", [8], G_F16)], data=F32x8), "PT_EFORMAT", "overlap")


# ---- valid files the writer does not make ------------------------------------
VALID_FILES = {
    # version 2 (same layout as 3), one pair, one F32 tensor
    "version2.gguf": gguf([kv_str("general.architecture", "llama")], [tinfo("w", [8])], F32x8,
                          version=2),
    # general.alignment 64: the data section and offsets on 64
    "align64.gguf": gguf([kv_u32("general.alignment", 64), kv("f", F64, struct.pack("<d", 0.5))],
                         [tinfo("a", [4], G_F16), tinfo("b", [2, 2], G_BF16, offset=64)],
                         struct.pack("<4H", 0x3C00, 0xC000, 0x0001, 0x7C00) + b"\0" * 56
                         + struct.pack("<4H", 0x3F80, 0xBF80, 0x4000, 0x0000), align=64),
    # a Q4_K tensor (256 elements, 144 bytes) next to an F32 one
    "quantised.gguf": gguf([kv_str("general.architecture", "llama")],
                           [tinfo("blk.0.ffn_down.weight", [256], G_Q4_K), tinfo("n", [8], offset=160)],
                           bytes(range(144)) + b"\0" * 16 + F32x8),
    # metadata only, the file ends right after the header
    "no_tensors.gguf": gguf([kv_u32("a", 7)], pad=False),
}


def main():
    for d in (MAL, VALID):
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.endswith(".gguf") or f == "EXPECTED.tsv":
                if d == MAL or f in VALID_FILES:
                    os.remove(os.path.join(d, f))
    names = set()
    lines = ["# file\tstatus\tmessage fragment (generated by tests/io/make_gguf_malformed.py)"]
    for name, data, status, frag in CASES:
        assert name not in names, name
        names.add(name)
        with open(os.path.join(MAL, name), "wb") as f:
            f.write(data)
        lines.append("%s\t%s\t%s" % (name, status, frag))
    with open(os.path.join(MAL, "EXPECTED.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for name, data in VALID_FILES.items():
        with open(os.path.join(VALID, name), "wb") as f:
            f.write(data)
    print("%d malformed files, %d valid files" % (len(CASES), len(VALID_FILES)))


if __name__ == "__main__":
    main()
