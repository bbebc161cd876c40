"""Tests for hybrid.codecs: round trips, compression, corruption, determinism, state."""

from __future__ import annotations

import math
import struct
import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.codecs import (
    CODEC_NAMES,
    FORMAT_VERSION,
    HEADER_NBYTES,
    MAGIC,
    Codec,
    PayloadError,
    TopKCodec,
    make_codec,
    raw_nbytes,
)

CODEC_IDS = {name: i for i, name in enumerate(CODEC_NAMES)}
_HEADER = struct.Struct("<4sBBHQQI")


def _vec(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def _frame(
    codec_id: int,
    numel: int,
    body: bytes,
    *,
    magic: bytes = MAGIC,
    version: int = FORMAT_VERSION,
    flags: int = 0,
) -> bytes:
    """A payload with a valid checksum, built from the documented wire format."""
    prefix = _HEADER.pack(magic, version, codec_id, flags, numel, len(body), 0)[:-4]
    crc = zlib.crc32(body, zlib.crc32(prefix))
    return prefix + struct.pack("<I", crc) + body


# -- round trips -------------------------------------------------------------------------------


def test_none_round_trip_is_exact() -> None:
    x = _vec(5000)
    codec = make_codec("none")
    assert torch.equal(codec.decode(codec.encode(x), x.numel()), x)


@pytest.mark.parametrize(("name", "rtol"), [("fp16", 1e-3), ("bf16", 8e-3)])
def test_half_precision_round_trip(name: str, rtol: float) -> None:
    x = _vec(5000) * 3.0
    codec = make_codec(name)
    y = codec.decode(codec.encode(x), x.numel())
    # atol only matters for fp16 subnormals (|x| < 6e-5).
    torch.testing.assert_close(y, x, rtol=rtol, atol=1e-7)


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_decode_returns_new_writable_float32_tensor(name: str) -> None:
    x = _vec(300)
    codec = make_codec(name, topk_ratio=0.1)
    payload = codec.encode(x)
    a = codec.decode(payload, 300)
    b = codec.decode(payload, 300)
    assert a.dtype == torch.float32 and a.shape == (300,)
    a.add_(1.0)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("name", CODEC_NAMES)
@pytest.mark.parametrize("numel", [0, 1, 7])
def test_tiny_and_zero_vectors(name: str, numel: int) -> None:
    codec = make_codec(name)
    zeros = torch.zeros(numel)
    assert torch.equal(codec.decode(codec.encode(zeros), numel), zeros)
    x = _vec(numel)
    y = codec.decode(make_codec(name).encode(x), numel)
    assert y.shape == (numel,)
    if numel:
        # Even topk keeps at least one entry: the largest.
        i = int(x.abs().argmax())
        assert math.isclose(y[i].item(), x[i].item(), rel_tol=1e-2)


def test_int8_error_within_one_step() -> None:
    x = _vec(10_000) * 2.0
    codec = make_codec("int8", seed=1)
    y = codec.decode(codec.encode(x), x.numel())
    step = x.abs().max().item() / 127
    assert (y - x).abs().max().item() <= step * (1 + 1e-5)
    levels = y / step
    assert torch.allclose(levels, levels.round(), atol=1e-3)


def _crafted_for_bias() -> torch.Tensor:
    # Scale 1 (step 1/127); every other entry sits 0.3 of a step above a level, which is where
    # round-to-nearest is most visibly biased while stochastic rounding is not.
    j = torch.arange(-60, 60, 4, dtype=torch.float32)
    return torch.cat([torch.tensor([1.0]), (j + 0.3) / 127, (j + 0.85) / 127])


def _max_mean_error_in_sigmas(x: torch.Tensor, mean: torch.Tensor, n: int) -> float:
    """Max |mean - x| in units of the std of the mean under unbiased stochastic rounding."""
    step = x.abs().max().item() / 127
    frac = (x / step) - torch.floor(x / step)
    sigma = step * torch.sqrt(frac * (1 - frac)) / math.sqrt(n)
    # Entries on a level have no variance; give them a float-noise-sized floor.
    sigma = sigma.clamp_min(1e-6)
    return ((mean - x).abs() / sigma).max().item()


def test_int8_is_unbiased_and_round_to_nearest_is_not() -> None:
    x = _crafted_for_bias()
    n = 2000
    codec = make_codec("int8", seed=3)
    total = torch.zeros_like(x, dtype=torch.float64)
    for _ in range(n):
        total += codec.decode(codec.encode(x), x.numel())
    mean = (total / n).to(torch.float32)
    # 61 entries at 6 sigma: a false alarm has probability ~1e-7.
    assert _max_mean_error_in_sigmas(x, mean, n) < 6.0

    step = x.abs().max() / 127
    nearest = torch.round(x / step) * step
    assert _max_mean_error_in_sigmas(x, nearest, n) > 20.0


def test_int8_all_zero_vector_has_zero_scale() -> None:
    codec = make_codec("int8")
    payload = codec.encode(torch.zeros(100))
    assert payload[HEADER_NBYTES : HEADER_NBYTES + 4] == struct.pack("<f", 0.0)
    assert torch.equal(codec.decode(payload, 100), torch.zeros(100))


def test_topk_keeps_exactly_the_k_largest() -> None:
    x = _vec(1000, seed=5)
    codec = make_codec("topk", topk_ratio=0.01, error_feedback=False)
    y = codec.decode(codec.encode(x), 1000)
    k = 10
    nonzero = torch.nonzero(y).flatten()
    assert nonzero.numel() == k
    expected = torch.topk(x.abs(), k).indices.sort().values
    assert torch.equal(nonzero, expected)
    assert torch.equal(y[nonzero], x[nonzero])


@pytest.mark.parametrize(("ratio", "numel", "k"), [(0.01, 1000, 10), (0.01, 5, 1), (0.333, 10, 4)])
def test_topk_k(ratio: float, numel: int, k: int) -> None:
    codec = make_codec("topk", topk_ratio=ratio)
    assert isinstance(codec, TopKCodec)
    assert codec.k_for(numel) == k
    y = codec.decode(codec.encode(_vec(numel)), numel)
    assert int((y != 0).sum()) == k


def test_topk_ratio_one_is_lossless() -> None:
    x = _vec(777)
    codec = make_codec("topk", topk_ratio=1.0)
    assert torch.equal(codec.decode(codec.encode(x), 777), x)
    assert codec.residual is not None and not codec.residual.any()


def _run_rounds(codec: Codec, n: int, rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    # Gradient-like: a persistent direction plus noise, so the true total keeps growing.
    g = torch.Generator().manual_seed(11)
    mean = torch.randn(n, generator=g) * 0.3
    sent = torch.zeros(n, dtype=torch.float64)
    decoded = torch.zeros(n, dtype=torch.float64)
    for _ in range(rounds):
        x = mean + torch.randn(n, generator=g)
        sent += x
        decoded += codec.decode(codec.encode(x), n)
    return sent, decoded


def test_topk_error_feedback_delays_but_loses_nothing() -> None:
    codec = make_codec("topk", topk_ratio=0.05)
    assert isinstance(codec, TopKCodec)
    sent, decoded = _run_rounds(codec, 2000, 200)
    assert codec.residual is not None
    # Whatever has not arrived yet is exactly the residual (up to float32 rounding).
    torch.testing.assert_close(sent - decoded, codec.residual.double(), rtol=0, atol=1e-4)
    assert ((sent - decoded).norm() / sent.norm()).item() < 0.1


def test_topk_without_error_feedback_loses_mass() -> None:
    codec = make_codec("topk", topk_ratio=0.05, error_feedback=False)
    sent, decoded = _run_rounds(codec, 2000, 200)
    assert ((sent - decoded).norm() / sent.norm()).item() > 0.5
    assert codec.state_dict() == {}


def test_topk_residual_of_wrong_size() -> None:
    codec = make_codec("topk")
    codec.encode(_vec(100))
    with pytest.raises(ValueError, match=r"residual has 100 entries but the vector has 50"):
        codec.encode(_vec(50))


# -- bytes on the wire -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [("none", 0.99, 1.0), ("fp16", 1.99, 2.0), ("bf16", 1.99, 2.0), ("int8", 3.99, 4.0)],
)
def test_compression_ratio(name: str, low: float, high: float) -> None:
    x = _vec(100_000)
    ratio = raw_nbytes(x.numel()) / len(make_codec(name).encode(x))
    assert low <= ratio <= high


def test_topk_one_percent_compresses_at_least_50x() -> None:
    x = _vec(100_000)
    payload = make_codec("topk", topk_ratio=0.01).encode(x)
    # 1000 entries * (3-byte index + 4-byte value) + header.
    assert len(payload) == HEADER_NBYTES + 1000 * 7
    assert raw_nbytes(x.numel()) / len(payload) >= 50


def test_raw_nbytes() -> None:
    assert raw_nbytes(4800) == 19_200
    with pytest.raises(ValueError, match="numel"):
        raw_nbytes(-1)


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_header_matches_documented_format(name: str) -> None:
    payload = make_codec(name).encode(_vec(64))
    magic, version, codec_id, flags, numel, body_len, crc = _HEADER.unpack_from(payload)
    assert (magic, version, flags, numel) == (MAGIC, FORMAT_VERSION, 0, 64)
    assert codec_id == CODEC_IDS[name]
    assert body_len == len(payload) - HEADER_NBYTES
    body = payload[HEADER_NBYTES:]
    assert crc == zlib.crc32(body, zlib.crc32(payload[: HEADER_NBYTES - 4]))


# -- corruption --------------------------------------------------------------------------------


@pytest.fixture(params=CODEC_NAMES)
def encoded(request: pytest.FixtureRequest) -> tuple[Codec, bytes]:
    codec = make_codec(request.param, topk_ratio=0.25)
    return codec, codec.encode(_vec(40))


def test_flipped_body_byte(encoded: tuple[Codec, bytes]) -> None:
    codec, payload = encoded
    bad = bytearray(payload)
    bad[HEADER_NBYTES + (len(payload) - HEADER_NBYTES) // 2] ^= 0x10
    with pytest.raises(PayloadError, match="checksum mismatch"):
        codec.decode(bytes(bad), 40)


def test_every_truncation(encoded: tuple[Codec, bytes]) -> None:
    codec, payload = encoded
    for cut in range(len(payload)):
        with pytest.raises(PayloadError, match="truncated"):
            codec.decode(payload[:cut], 40)


def test_trailing_bytes(encoded: tuple[Codec, bytes]) -> None:
    codec, payload = encoded
    with pytest.raises(PayloadError, match="trailing"):
        codec.decode(payload + b"\x00", 40)


def test_wrong_magic(encoded: tuple[Codec, bytes]) -> None:
    codec, payload = encoded
    with pytest.raises(PayloadError, match="bad magic"):
        codec.decode(b"XXXX" + payload[4:], 40)


@pytest.mark.parametrize("numel", [39, 41, 0])
def test_wrong_numel(encoded: tuple[Codec, bytes], numel: int) -> None:
    codec, payload = encoded
    with pytest.raises(PayloadError, match=f"holds 40 entries but {numel} were expected"):
        codec.decode(payload, numel)


@pytest.mark.parametrize("sender", CODEC_NAMES)
@pytest.mark.parametrize("receiver", CODEC_NAMES)
def test_codec_mismatch(sender: str, receiver: str) -> None:
    payload = make_codec(sender).encode(_vec(40))
    if sender == receiver:
        make_codec(receiver).decode(payload, 40)
        return
    msg = f"payload was encoded with '{sender}' but this codec is '{receiver}'"
    with pytest.raises(PayloadError, match=msg):
        make_codec(receiver).decode(payload, 40)


@settings(max_examples=150, deadline=None, database=None)
@given(
    name=st.sampled_from(CODEC_NAMES),
    position=st.integers(min_value=0, max_value=10_000),
    xor=st.integers(min_value=1, max_value=255),
)
def test_any_single_byte_corruption_is_caught(name: str, position: int, xor: int) -> None:
    codec = make_codec(name, topk_ratio=0.2)
    payload = bytearray(codec.encode(_vec(50)))
    payload[position % len(payload)] ^= xor
    with pytest.raises(PayloadError):
        codec.decode(bytes(payload), 50)


def test_header_field_errors() -> None:
    codec = make_codec("none")
    body = struct.pack("<2f", 1.0, 2.0)
    assert codec.decode(_frame(0, 2, body), 2).tolist() == [1.0, 2.0]
    cases = [
        (_frame(0, 2, body, version=2), "format version 2"),
        (_frame(9, 2, body), "unknown codec id 9"),
        (_frame(0, 2, body, flags=1), "reserved flags"),
        (_frame(0, 2, body[:4]), "body is 4 bytes but 8"),
    ]
    for payload, match in cases:
        with pytest.raises(PayloadError, match=match):
            codec.decode(payload, 2)


@pytest.mark.parametrize(
    ("name", "body", "match"),
    [
        ("none", struct.pack("<2f", 1.0, math.nan), "NaN or inf"),
        ("fp16", struct.pack("<2e", 1.0, math.inf), "NaN or inf"),
        ("bf16", b"\x80\x3f\x80\x7f", "NaN or inf"),  # 1.0, +inf
        ("int8", struct.pack("<f", math.nan) + b"\x01\x02", "invalid scale"),
        ("int8", struct.pack("<f", -1.0) + b"\x01\x02", "invalid scale"),
        ("int8", struct.pack("<f", 1.0) + b"\x01\x80", "-128"),
        ("topk", b"\x02" + struct.pack("<f", 1.0), "out of range"),
        ("topk", b"\x01\x01" + struct.pack("<2f", 1.0, 2.0), "strictly increasing"),
        ("topk", b"\x00" + struct.pack("<f", math.inf), "NaN or inf"),
        ("topk", b"\x00\x01\x02", "not k \\* 5"),
    ],
)
def test_well_framed_but_invalid_bodies(name: str, body: bytes, match: str) -> None:
    with pytest.raises(PayloadError, match=match):
        make_codec(name).decode(_frame(CODEC_IDS[name], 2, body), 2)


def test_payload_error_is_value_error() -> None:
    assert issubclass(PayloadError, ValueError)
    with pytest.raises(TypeError):
        make_codec("none").decode("not bytes", 1)  # type: ignore[arg-type]


# -- bad input to encode ----------------------------------------------------------------------


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_encode_rejects_bad_vectors(name: str) -> None:
    codec = make_codec(name)
    with pytest.raises(ValueError, match="1-D"):
        codec.encode(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="float32"):
        codec.encode(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="NaN or inf"):
        codec.encode(torch.tensor([1.0, math.nan]))
    with pytest.raises(ValueError, match="NaN or inf"):
        codec.encode(torch.tensor([1.0, -math.inf]))


def test_fp16_refuses_out_of_range() -> None:
    with pytest.raises(ValueError, match="fp16 range"):
        make_codec("fp16").encode(torch.tensor([1.0, 1e5]))
    assert make_codec("bf16").encode(torch.tensor([1.0, 1e5]))


def test_encode_accepts_views_and_grad_tensors() -> None:
    base = _vec(20).requires_grad_()
    x = base[::2]
    codec = make_codec("none")
    assert torch.equal(codec.decode(codec.encode(x), 10), x.detach())


# -- determinism and state ---------------------------------------------------------------------


def test_int8_same_seed_same_bytes() -> None:
    x = _vec(1000)
    a, b, c = make_codec("int8", seed=7), make_codec("int8", seed=7), make_codec("int8", seed=8)
    first = [a.encode(x) for _ in range(3)]
    assert first == [b.encode(x) for _ in range(3)]
    assert first[0] != c.encode(x)
    assert first[0] != first[1]


def test_int8_state_dict_restores_rng() -> None:
    x = _vec(1000)
    a = make_codec("int8", seed=1)
    a.encode(x)
    state = a.state_dict()
    expected = a.encode(x)
    b = make_codec("int8", seed=999)
    b.load_state_dict(state)
    assert b.encode(x) == expected


def test_topk_state_dict_restores_residual() -> None:
    a = make_codec("topk", topk_ratio=0.05)
    assert a.state_dict()["residual"].numel() == 0
    for seed in range(3):
        a.encode(_vec(500, seed))
    state = a.state_dict()
    residual = state["residual"].clone()
    expected = a.encode(_vec(500, 9))
    # state_dict hands out copies: encoding afterwards must not change the saved state.
    assert torch.equal(state["residual"], residual)
    b = make_codec("topk", topk_ratio=0.05)
    b.load_state_dict(state)
    assert b.encode(_vec(500, 9)) == expected
    b.load_state_dict({"residual": torch.zeros(0)})
    assert isinstance(b, TopKCodec) and b.residual is None


@pytest.mark.parametrize(
    ("name", "state", "match"),
    [
        ("topk", {}, "state keys"),
        ("topk", {"residual": torch.zeros(3), "x": torch.zeros(1)}, "state keys"),
        ("topk", {"residual": torch.zeros(2, 2)}, "1-D"),
        ("topk", {"residual": torch.tensor([math.nan])}, "finite"),
        ("int8", {"rng_state": torch.zeros(3, dtype=torch.uint8)}, "generator state"),
        ("int8", {"rng_state": torch.zeros(3)}, "uint8"),
        ("fp16", {"residual": torch.zeros(3)}, "state keys"),
    ],
)
def test_load_state_dict_rejects_bad_state(
    name: str, state: dict[str, torch.Tensor], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        make_codec(name).load_state_dict(state)


# -- make_codec --------------------------------------------------------------------------------


def test_make_codec_names() -> None:
    for name in CODEC_NAMES:
        codec = make_codec(name)
        assert isinstance(codec, Codec) and codec.name == name


def test_make_codec_unknown_name() -> None:
    msg = "codec: unknown 'xyz'; choose one of none, fp16, bf16, int8, topk"
    with pytest.raises(ValueError, match=msg):
        make_codec("xyz")


@pytest.mark.parametrize("ratio", [0, 0.0, -0.1, 1.5, math.nan, math.inf, True, "0.1"])
def test_make_codec_bad_ratio(ratio: object) -> None:
    with pytest.raises(ValueError, match=r"topk_ratio must be in \(0, 1\]"):
        make_codec("topk", topk_ratio=ratio)  # type: ignore[arg-type]


def test_make_codec_bad_flags() -> None:
    with pytest.raises(ValueError, match="error_feedback"):
        make_codec("topk", error_feedback="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed"):
        make_codec("int8", seed=1.5)  # type: ignore[arg-type]
