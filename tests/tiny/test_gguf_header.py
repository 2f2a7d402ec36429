"""The GGUF header reader (``gguf_header``): a file the gguf package wrote reads back field for field, and each
field outside its range is refused by name, before anything is allocated."""

from __future__ import annotations

import struct

import pytest
from gguf_files import vocab_file

from specnotes import validate
from specnotes.tiny import gguf_export, gguf_header

u32 = lambda n: struct.pack("<I", n)  # noqa: E731
u64 = lambda n: struct.pack("<Q", n)  # noqa: E731


def string(text: bytes) -> bytes:
    return u64(len(text)) + text


def header(pairs: list[bytes], tensors: list[bytes] = (), version: int = 3) -> bytes:
    return b"GGUF" + u32(version) + u64(len(tensors)) + u64(len(pairs)) + b"".join(pairs) + b"".join(tensors)


def tensor(name: bytes, dims: list[int], kind: int = 0, offset: int = 0) -> bytes:
    return string(name) + u32(len(dims)) + b"".join(map(u64, dims)) + u32(kind) + u64(offset)


def test_a_file_the_gguf_package_wrote_reads_back(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(6)
    writer.add_token_list(["a", "b", "\u00e9"])
    writer.add_token_scores([0.5, -1.0, 2.0])
    writer.add_add_bos_token(True)
    writer.add_tensor("w", np.zeros((3, 5), dtype=np.float32))
    writer.add_tensor("b", np.ones(7, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    h = gguf_header.read_header(path)
    fields = gguf.GGUFReader(str(path)).fields
    assert h.version == 3 and h.metadata["llama.block_count"] == 6 == fields["llama.block_count"].contents()
    assert h.metadata["tokenizer.ggml.tokens"] == ["a", "b", "\u00e9"] and h.metadata["tokenizer.ggml.add_bos_token"]
    assert h.metadata["tokenizer.ggml.scores"] == pytest.approx([0.5, -1.0, 2.0])
    assert h.tensors["w"][0] == (5, 3) and h.tensors["b"][0] == (7,)  # ggml's order: the fastest dimension first
    reader = gguf.GGUFReader(str(path))
    assert h.data_start == reader.data_offset
    assert {t.name: int(t.data_offset) - reader.data_offset for t in reader.tensors} == \
        {name: offset for name, (_, _, offset) in h.tensors.items()}


BOOL, STRING, ARRAY, U32 = 7, 8, 9, 4


@pytest.mark.parametrize("data, says", [
    (b"GGUF" + u32(1) + u64(0) + u64(0), r"version must be 2 or 3 \(a little-endian GGUF\), got 1"),
    (b"GGUF" + struct.pack(">I", 3) + u64(0) + u64(0), r"version must be 2 or 3 .*got 50331648"),  # big-endian
    (b"GGUF" + u32(3) + u64(0), r"metadata pair count needs 8 bytes at byte 16, but the file has 0 left"),
    (header([string(b"k") + u32(BOOL) + b"\x02"]), r"k must be a bool \(0 or 1\), got 2"),
    (header([string(b"k") + u32(13) + b"\x00"]), r"k's value type must be an integer in \[0, 12\].*got 13"),
    (header([string(b"k") + u32(ARRAY) + u32(ARRAY) + u64(0)]),
     r"k's element type must be one of 0-8, 10-12 \(arrays of arrays are not read\), got 9"),
    (header([string(b"k") + u32(ARRAY) + u32(U32) + u64(2**40)]),
     r"k's element count must be an integer in \[0, 0\], got 1,099,511,627,776: the 0 bytes left"),
    (header([string(b"k") + u32(STRING) + u64(2**62)]), r"k's length must be an integer in \[0, 0\], got "
     r"4,611,686,018,427,387,904: the 0 bytes left hold no more at 1 byte each \(a truncated or corrupt GGUF header\)"),
    (header([string(b"\xff") + u32(U32) + u32(1)]), r"metadata key 0 must be UTF-8 text, got b'\\xff'"),
    (header([string(b"k") + u32(U32) + u32(1)] * 2), r"metadata key 'k' appears twice"),
    (header([string(b"general.alignment") + u32(U32) + u32(48)]), r"general.alignment must be a power of two, got 48"),
    (header([], [tensor(b"t", [2] * 5)]), r"tensor 't''s dimension count must be an integer in \[1, 4\], got 5"),
    (header([], [tensor(b"t", [2**62, 4])]), r"tensor 't' has 1.84e\+19 elements, past 2\^63 - 1"),
    (header([], [tensor(b"t", [2], kind=4000)]), r"tensor 't''s type must be an integer in \[0, 1023\], got 4000"),
    (header([], [tensor(b"t", [2], offset=32)]), r"tensor 't''s offset must be a multiple of 32 within the 0 bytes"),
    (header([], [tensor(b"t", [2]), tensor(b"t", [2])]), r"tensor 't' appears twice"),
    (header([], [tensor(b"x" * 65, [2])]), r"tensor 0's name's length must be an integer in \[0, 64\], got 65"),
    (b"GGUF" + u32(3) + u64(2**63) + u64(0), r"tensor count must be an integer in \[0, 1,048,576\], got"),
])
def test_a_bad_field_is_refused_by_name(data, says):
    with pytest.raises(validate.BadArgument, match=r"^GGUF file h\.gguf: " + says):
        gguf_header.parse_header(data, "h.gguf")


def test_a_header_that_fits_reads(tmp_path):
    ok = header([string(b"k") + u32(ARRAY) + u32(BOOL) + u64(2) + b"\x01\x00"], [tensor(b"t", [2, 3])])
    h = gguf_header.parse_header(ok + b"\x00" * 64, "h.gguf")
    assert h.metadata == {"k": [True, False]} and h.tensors == {"t": ((2, 3), 0, 0)} and h.data_start % 32 == 0


def test_what_is_not_a_gguf_file_is_refused_by_name(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"PK\x03\x04")
    (tmp_path / "empty.gguf").write_bytes(b"")
    for name, says in (("w.bin", r"w\.bin is not a GGUF file: it starts with b'PK\\x03\\x04'"),
                       ("empty.gguf", r"empty\.gguf is not a GGUF file: it starts with b''"),
                       ("missing.gguf", r"no model file at .*missing\.gguf")):
        with pytest.raises(validate.BadArgument, match=says):
            gguf_header.read_header(tmp_path / name)


def test_the_vocabularys_fields_are_checked(tmp_path):
    path = vocab_file(tmp_path / "v.gguf", [f"t{i}" for i in range(300)], bos=400)
    with pytest.raises(validate.BadArgument, match=r"tokenizer\.ggml\.bos_token_id must be a token id in \[0, 299\], "
                                                   r"got 400"):
        gguf_export.vocabulary(path)
    numbers = tmp_path / "n.gguf"
    numbers.write_bytes(header([string(b"tokenizer.ggml.tokens") + u32(ARRAY) + u32(U32) + u64(2) + u32(1) + u32(2)]))
    with pytest.raises(validate.BadArgument, match=r"n\.gguf: tokenizer\.ggml\.tokens must be an array of strings"):
        gguf_export.vocabulary(numbers)
