"""Update codecs: turn a worker's flat float32 update vector into wire bytes and back.

Every payload is a fixed 28-byte little-endian header followed by a codec-specific body::

    magic     4s   b"HYUC"
    version   u8   FORMAT_VERSION
    codec id  u8   none=0 fp16=1 bf16=2 int8=3 topk=4
    flags     u16  reserved, must be 0
    numel     u64  length of the decoded vector
    body_len  u64  bytes that follow the header
    crc32     u32  zlib.crc32 of the 24 header bytes above followed by the body

Bodies (all little-endian):

- ``none``: numel float32.
- ``fp16`` / ``bf16``: numel 16-bit floats.
- ``int8``: float32 scale s = max|x|, then numel int8 levels q in [-127, 127]; x ~ q * s / 127.
- ``topk``: k strictly increasing indices of ``index_width(numel)`` bytes each, then k float32
  values. k is implied by body_len.

``decode`` validates all of it and raises :class:`PayloadError` rather than return garbage.
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import ClassVar

import numpy as np
import torch

__all__ = [
    "CODEC_NAMES",
    "FORMAT_VERSION",
    "HEADER_NBYTES",
    "MAGIC",
    "BFloat16Codec",
    "Codec",
    "Float16Codec",
    "Float32Codec",
    "Int8Codec",
    "PayloadError",
    "TopKCodec",
    "index_width",
    "make_codec",
    "raw_nbytes",
]

CODEC_NAMES: tuple[str, ...] = ("none", "fp16", "bf16", "int8", "topk")

MAGIC = b"HYUC"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBBHQQI")
HEADER_NBYTES = _HEADER.size
# The crc covers the header fields too, so a flipped bit anywhere in a payload is caught.
_CRC_PREFIX = HEADER_NBYTES - 4

_FP16_MAX = 65504.0
_INT8_LEVELS = 127


class PayloadError(ValueError):
    """A payload that cannot be decoded: corrupt, truncated, wrong codec or wrong size."""


def raw_nbytes(numel: int) -> int:
    """Bytes of the uncompressed float32 vector, the denominator of a compression ratio."""
    _check_numel(numel)
    return 4 * numel


def index_width(numel: int) -> int:
    """Bytes per index in a ``topk`` body: the fewest that can address ``numel`` entries."""
    _check_numel(numel)
    return max(1, -(-(numel - 1).bit_length() // 8))


def _check_numel(numel: int) -> None:
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
        raise ValueError(f"numel must be a non-negative int, got {numel!r}")


def _read(buf: memoryview, dtype: str, count: int, offset: int) -> np.ndarray:
    """A writable, native-endian copy of ``count`` items of little-endian ``dtype`` in ``buf``."""
    wire = np.dtype(dtype)
    return np.frombuffer(buf, dtype=wire, count=count, offset=offset).astype(wire.newbyteorder("="))


def _le_bytes(array: np.ndarray, dtype: str) -> bytes:
    # A no-op view on little-endian hosts; a byte swap on big-endian ones.
    return array.astype(dtype, copy=False).tobytes()


def _all_finite(tensor: torch.Tensor) -> bool:
    # aminmax is one pass and propagates NaN; isfinite().all() is ~10x slower on CPU.
    if tensor.numel() == 0:
        return True
    lo, hi = torch.aminmax(tensor)
    return math.isfinite(lo.item()) and math.isfinite(hi.item())


class Codec:
    """Base class: header framing and validation; subclasses only define the body."""

    name: ClassVar[str] = ""
    codec_id: ClassVar[int] = -1

    def encode(self, vector: torch.Tensor) -> bytes:
        """Compress a 1-D float32 CPU vector into a self-describing, checksummed payload."""
        vec, absmax = self._check_vector(vector)
        parts = self._encode_body(vec, absmax)
        body_len = sum(len(p) for p in parts)
        prefix = _HEADER.pack(MAGIC, FORMAT_VERSION, self.codec_id, 0, vec.numel(), body_len, 0)
        crc = zlib.crc32(prefix[:_CRC_PREFIX])
        for part in parts:
            crc = zlib.crc32(part, crc)
        return b"".join([prefix[:_CRC_PREFIX], struct.pack("<I", crc), *parts])

    def decode(self, payload: bytes, numel: int) -> torch.Tensor:
        """Return a new 1-D float32 tensor of length ``numel``; raise PayloadError if invalid."""
        _check_numel(numel)
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
        buf = memoryview(payload).cast("B")
        body_len = self._check_header(buf, numel)
        return self._decode_body(buf, numel, body_len)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Copies of the codec's mutable state (error-feedback residual, RNG state)."""
        return {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore state saved by :meth:`state_dict` of a codec of the same kind."""
        self._check_state_keys(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # -- subclass hooks -------------------------------------------------------------------------

    def _encode_body(self, vec: torch.Tensor, absmax: float) -> list[bytes]:
        raise NotImplementedError

    def _decode_body(self, buf: memoryview, numel: int, body_len: int) -> torch.Tensor:
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------------------

    def _check_vector(self, vector: torch.Tensor) -> tuple[torch.Tensor, float]:
        if not isinstance(vector, torch.Tensor):
            raise TypeError(f"{self.name}: encode expects a torch.Tensor, got {type(vector)}")
        if vector.dim() != 1:
            raise ValueError(f"{self.name}: encode expects a 1-D vector, got {tuple(vector.shape)}")
        if vector.dtype != torch.float32:
            raise ValueError(f"{self.name}: encode expects float32, got {vector.dtype}")
        if vector.device.type != "cpu":
            raise ValueError(f"{self.name}: encode expects a CPU tensor, got {vector.device}")
        vec = vector.detach().contiguous()
        if vec.numel() == 0:
            return vec, 0.0
        lo, hi = (v.item() for v in torch.aminmax(vec))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            # A NaN/inf update would poison the global model (and a topk residual) for good.
            raise ValueError(f"{self.name}: encode got a vector with NaN or inf entries")
        return vec, max(abs(lo), abs(hi))

    def _check_header(self, buf: memoryview, numel: int) -> int:
        size = len(buf)
        if size < HEADER_NBYTES:
            raise PayloadError(
                f"payload truncated: {size} bytes is shorter than the {HEADER_NBYTES}-byte header"
            )
        magic, version, codec_id, flags, n, body_len, crc = _HEADER.unpack_from(buf)
        if magic != MAGIC:
            raise PayloadError(f"bad magic {magic!r} (expected {MAGIC!r}): not a codec payload")
        if version != FORMAT_VERSION:
            raise PayloadError(
                f"unsupported payload format version {version} (this reader knows {FORMAT_VERSION})"
            )
        if codec_id != self.codec_id:
            if codec_id >= len(CODEC_NAMES):
                raise PayloadError(f"payload has unknown codec id {codec_id}")
            raise PayloadError(
                f"payload was encoded with '{CODEC_NAMES[codec_id]}' but this codec is "
                f"'{self.name}'"
            )
        if flags != 0:
            raise PayloadError(f"payload has reserved flags set (0x{flags:04x})")
        if n != numel:
            raise PayloadError(f"payload holds {n} entries but {numel} were expected")
        have = size - HEADER_NBYTES
        if have < body_len:
            raise PayloadError(f"payload truncated: body has {have} of {body_len} bytes")
        if have > body_len:
            raise PayloadError(f"payload has {have - body_len} trailing bytes after the body")
        actual = zlib.crc32(buf[HEADER_NBYTES:], zlib.crc32(buf[:_CRC_PREFIX]))
        if actual != crc:
            raise PayloadError(
                f"payload checksum mismatch (crc32 0x{actual:08x}, header says 0x{crc:08x}): "
                "corrupted in transit"
            )
        return body_len

    def _check_body_len(self, body_len: int, expected: int) -> None:
        if body_len != expected:
            raise PayloadError(
                f"{self.name} body is {body_len} bytes but {expected} were expected for its numel"
            )

    def _check_state_keys(self, state: dict[str, torch.Tensor]) -> None:
        expected = set(self.state_dict())
        if not isinstance(state, dict) or set(state) != expected:
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{self.name}: state keys {got} do not match {sorted(expected)}")


def _finite_or_raise(out: torch.Tensor, name: str) -> torch.Tensor:
    if not _all_finite(out):
        raise PayloadError(f"{name} payload decodes to NaN or inf entries")
    return out


class Float32Codec(Codec):
    """``none``: the float32 bytes as they are (still framed and checksummed)."""

    name = "none"
    codec_id = 0

    def _encode_body(self, vec: torch.Tensor, absmax: float) -> list[bytes]:
        return [_le_bytes(vec.numpy(), "<f4")]

    def _decode_body(self, buf: memoryview, numel: int, body_len: int) -> torch.Tensor:
        self._check_body_len(body_len, 4 * numel)
        out = torch.from_numpy(_read(buf, "<f4", numel, HEADER_NBYTES))
        return _finite_or_raise(out, self.name)


class Float16Codec(Codec):
    """``fp16``: IEEE half precision; refuses vectors outside its range instead of sending inf."""

    name = "fp16"
    codec_id = 1

    def _encode_body(self, vec: torch.Tensor, absmax: float) -> list[bytes]:
        if absmax > _FP16_MAX:
            raise ValueError(
                f"fp16: an entry of magnitude {absmax:.3g} exceeds the fp16 range ({_FP16_MAX:g});"
                " use bf16 or int8"
            )
        return [_le_bytes(vec.to(torch.float16).numpy(), "<f2")]

    def _decode_body(self, buf: memoryview, numel: int, body_len: int) -> torch.Tensor:
        self._check_body_len(body_len, 2 * numel)
        # torch's half->float is vectorized; numpy's is several times slower.
        half = torch.from_numpy(_read(buf, "<f2", numel, HEADER_NBYTES))
        return _finite_or_raise(half.to(torch.float32), self.name)


class BFloat16Codec(Codec):
    """``bf16``: float32 range with 8 bits of mantissa; numpy has no bf16, so bytes go via int16."""

    name = "bf16"
    codec_id = 2

    def _encode_body(self, vec: torch.Tensor, absmax: float) -> list[bytes]:
        bits = vec.to(torch.bfloat16).view(torch.int16).numpy()
        return [_le_bytes(bits, "<i2")]

    def _decode_body(self, buf: memoryview, numel: int, body_len: int) -> torch.Tensor:
        self._check_body_len(body_len, 2 * numel)
        bits = torch.from_numpy(_read(buf, "<i2", numel, HEADER_NBYTES))
        return _finite_or_raise(bits.view(torch.bfloat16).to(torch.float32), self.name)


class Int8Codec(Codec):
    """``int8``: QSGD-style unbiased stochastic quantization to 255 levels, per-tensor scale."""

    name = "int8"
    codec_id = 3

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._generator = torch.Generator(device="cpu")
        self._generator.manual_seed(seed)

    def __repr__(self) -> str:
        return f"Int8Codec(seed={self.seed})"

    def _encode_body(self, vec: torch.Tensor, absmax: float) -> list[bytes]:
        scale = np.float32(absmax)
        if absmax == 0.0:
            levels = torch.zeros(vec.numel(), dtype=torch.int8)
        else:
            # floor(y + u), u ~ U[0, 1), rounds y up with probability frac(y): E[level] = y.
            y = vec * (_INT8_LEVELS / float(scale))
            y.add_(torch.rand(vec.numel(), generator=self._generator)).floor_()
            levels = y.clamp_(-_INT8_LEVELS, _INT8_LEVELS).to(torch.int8)
        return [_le_bytes(np.array([scale]), "<f4"), levels.numpy().tobytes()]

    def _decode_body(self, buf: memoryview, numel: int, body_len: int) -> torch.Tensor:
        self._check_body_len(body_len, 4 + numel)
        scale = float(_read(buf, "<f4", 1, HEADER_NBYTES)[0])
        if not math.isfinite(scale) or scale < 0.0:
            raise PayloadError(f"int8 payload has an invalid scale {scale!r}")
        levels = torch.from_numpy(_read(buf, "i1", numel, HEADER_NBYTES + 4))
        if numel and int(levels.min()) < -_INT8_LEVELS:
            raise PayloadError("int8 payload has level -128, outside [-127, 127]")
        return levels.to(torch.float32).mul_(scale / _INT8_LEVELS)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"rng_state": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._check_state_keys(state)
        rng = state["rng_state"]
        if not isinstance(rng, torch.Tensor) or rng.dtype != torch.uint8:
            raise ValueError("int8: state 'rng_state' must be a uint8 tensor from state_dict()")
        try:
            self._generator.set_state(rng.detach().cpu().clone())
        except RuntimeError as exc:
            raise ValueError("int8: state 'rng_state' is not a CPU generator state") from exc


class TopKCodec(Codec):
    """``topk``: the k largest-magnitude entries, with optional error feedback.

    With error feedback the codec keeps a residual r of what it has not sent yet: it compresses
    x + r and keeps r <- (x + r) - decoded, so updates are delayed, never dropped.
    """

    name = "topk"
    codec_id = 4

    def __init__(self, ratio: float = 0.01, error_feedback: bool = True) -> None:
        _check_ratio(ratio)
        self.ratio = float(ratio)
        self.error_feedback = error_feedback
        self._residual: torch.Tensor | None = None

    def __repr__(self) -> str:
        return f"TopKCodec(ratio={self.ratio}, error_feedback={self.error_feedback})"

    def k_for(self, numel: int) -> int:
        """Entries sent for a vector of ``numel``: max(1, ceil(ratio * numel)), at most numel."""
        _check_numel(numel)
        return min(numel, max(1, math.ceil(self.ratio * numel)))

    @property
    def residual(self) -> torch.Tensor | None:
        """The unsent remainder (None before the first encode or without error feedback)."""
        return self._residual

    def _encode_body(self, vec: torch.Tensor, absmax: float) -> list[bytes]:
        numel = vec.numel()
        if self.error_feedback and self._residual is not None:
            if self._residual.numel() != numel:
                raise ValueError(
                    f"topk: error-feedback residual has {self._residual.numel()} entries but the "
                    f"vector has {numel}; use one codec instance per model"
                )
            acc = vec + self._residual
        else:
            acc = vec.clone() if self.error_feedback else vec
        k = self.k_for(numel)
        idx = torch.topk(acc.abs(), k, sorted=False).indices.sort().values
        values = acc[idx]
        if not _all_finite(values):
            raise ValueError("topk: vector plus residual overflowed to inf")
        if self.error_feedback:
            # The kept values go out exactly, so (x + r) - decoded is acc with them zeroed.
            acc[idx] = 0.0
            self._residual = acc
        width = index_width(numel)
        # Little-endian indices cut to `width` bytes: 3 instead of 4 for up to 16.7M entries.
        wide = idx.numpy().astype("<u8").view(np.uint8).reshape(k, 8)
        packed = wide[:, :width].tobytes()
        return [packed, _le_bytes(values.numpy(), "<f4")]

    def _decode_body(self, buf: memoryview, numel: int, body_len: int) -> torch.Tensor:
        width = index_width(numel)
        k, rem = divmod(body_len, width + 4)
        if rem or k > numel:
            raise PayloadError(
                f"topk body of {body_len} bytes is not k * {width + 4} with k <= {numel}"
            )
        raw = np.frombuffer(buf, dtype=np.uint8, count=k * width, offset=HEADER_NBYTES)
        wide = np.zeros((k, 8), dtype=np.uint8)
        wide[:, :width] = raw.reshape(k, width)
        idx = wide.view("<u8").reshape(k).astype(np.int64)
        if k and (idx[-1] >= numel or (k > 1 and not (np.diff(idx) > 0).all())):
            raise PayloadError("topk payload indices are out of range or not strictly increasing")
        values = torch.from_numpy(_read(buf, "<f4", k, HEADER_NBYTES + k * width))
        _finite_or_raise(values, self.name)
        out = torch.zeros(numel, dtype=torch.float32)
        out[torch.from_numpy(idx)] = values
        return out

    def state_dict(self) -> dict[str, torch.Tensor]:
        if not self.error_feedback:
            return {}
        if self._residual is None:
            return {"residual": torch.zeros(0, dtype=torch.float32)}
        return {"residual": self._residual.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self._check_state_keys(state)
        if not self.error_feedback:
            return
        residual = state["residual"]
        if not isinstance(residual, torch.Tensor) or residual.dim() != 1:
            raise ValueError("topk: state 'residual' must be a 1-D tensor")
        if not residual.is_floating_point() or not _all_finite(residual):
            raise ValueError("topk: state 'residual' must hold finite floats")
        self._residual = (
            None if residual.numel() == 0 else residual.detach().to("cpu", torch.float32).clone()
        )


def _check_ratio(ratio: float) -> None:
    ok = isinstance(ratio, int | float) and not isinstance(ratio, bool)
    if not ok or not (0.0 < ratio <= 1.0):
        raise ValueError(f"topk_ratio must be in (0, 1], got {ratio!r}")


def make_codec(
    name: str, *, topk_ratio: float = 0.01, error_feedback: bool = True, seed: int = 0
) -> Codec:
    """Build a fresh codec (one per worker: topk and int8 carry per-instance state)."""
    if name not in CODEC_NAMES:
        raise ValueError(f"codec: unknown {name!r}; choose one of {', '.join(CODEC_NAMES)}")
    _check_ratio(topk_ratio)
    if not isinstance(error_feedback, bool):
        raise ValueError(f"error_feedback must be a bool, got {error_feedback!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    if name == "none":
        return Float32Codec()
    if name == "fp16":
        return Float16Codec()
    if name == "bf16":
        return BFloat16Codec()
    if name == "int8":
        return Int8Codec(seed=seed)
    return TopKCodec(ratio=topk_ratio, error_feedback=error_feedback)
