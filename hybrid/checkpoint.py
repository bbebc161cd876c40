"""Checkpoints: written atomically, loaded safely, with the previous good one kept.

A checkpoint is a ``torch.save`` of plain data only (tensors, numbers, strings,
bytes, lists, dicts), so it loads with ``torch.load(weights_only=True)``: a file
whose pickle would run code is refused, not executed. numpy arrays and random
generators are converted to such data here (``to_plain`` / ``from_plain``).

Files are ``checkpoints/ckpt-<version>.pt`` in the run directory; the newest
``keep`` are kept, so a checkpoint that turns out corrupt leaves its
predecessor to resume from.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

_NAME = re.compile(r"ckpt-(\d+)\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: refused (unsafe), corrupt, or missing."""


# --- plain data ----------------------------------------------------------------------------------


def to_plain(value: Any) -> Any:
    """Turn numpy arrays, numpy scalars and random generators into weights-only-loadable data."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"__objects__": [to_plain(v) for v in value.tolist()], "shape": value.shape}
        return {
            "__ndarray__": torch.from_numpy(np.ascontiguousarray(value).copy()),
            "dtype": value.dtype.str,
        }
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.random.Generator):
        return {"__generator__": value.bit_generator.state}
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [to_plain(v) for v in value]
        return items if isinstance(value, list) else {"__tuple__": items}
    return value


def from_plain(value: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return _array_from_plain(value)
        if "__objects__" in value:
            out = np.empty(len(value["__objects__"]), dtype=object)
            out[:] = [from_plain(v) for v in value["__objects__"]]
            return out.reshape(value["shape"])
        if "__generator__" in value:
            return _generator_from_plain(value["__generator__"])
        if "__tuple__" in value:
            return tuple(from_plain(v) for v in value["__tuple__"])
        return {k: from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    return value


BIT_GENERATORS: dict[str, type[np.random.BitGenerator]] = {
    cls.__name__: cls
    for cls in (
        np.random.PCG64,
        np.random.PCG64DXSM,
        np.random.MT19937,
        np.random.Philox,
        np.random.SFC64,
    )
}
"""The bit generators numpy ships, by the name their state records. A checkpoint's
generator is rebuilt only from one of these: looking a name up on ``numpy.random`` would
call whatever that name is."""


def _generator_from_plain(state: Any) -> np.random.Generator:
    name = state.get("bit_generator") if isinstance(state, dict) else None
    cls = BIT_GENERATORS.get(name) if isinstance(name, str) else None
    if cls is None:
        allowed = ", ".join(BIT_GENERATORS)
        raise CheckpointError(
            f"a random generator's state names the bit generator {str(name)[:80]!r}; "
            f"only numpy's own are restored ({allowed})"
        )
    bit_generator = cls()
    try:
        bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        raise CheckpointError(
            f"a random generator's {name} state is malformed ({_first_line(exc)})"
        ) from None
    return np.random.Generator(bit_generator)


def _array_from_plain(value: dict[str, Any]) -> np.ndarray:
    tensor = value["__ndarray__"]
    try:
        dtype = np.dtype(value["dtype"])
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(
            f"an array's dtype {str(value.get('dtype'))[:80]!r} is not a numpy dtype "
            f"({_first_line(exc)})"
        ) from None
    if dtype.kind not in "biufc" or not isinstance(tensor, torch.Tensor):
        raise CheckpointError(
            f"an array of dtype {dtype.str!r} cannot be restored: only numeric arrays are data"
        )
    try:
        return tensor.numpy().astype(dtype, copy=True)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"an array of dtype {dtype.str!r}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


# --- files ---------------------------------------------------------------------------------------


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save(run_dir: Path, version: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` atomically (temporary file, fsync, rename); prune all but ``keep``."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ckpt-{version:09d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write (disk full, a signal) leaves no debris
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)
    for old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def remove_stale_tmp(run_dir: Path) -> None:
    """Remove the ``*.tmp`` files an interrupted write left (checkpoints, config.json,
    summary.json): called by a run or resume that holds the run directory's lock, so no
    other writer can own them."""
    for folder in (Path(run_dir), checkpoint_dir(run_dir)):
        if folder.is_dir():
            for stale in folder.glob("*.tmp"):
                if stale.is_file() and not stale.is_symlink():
                    stale.unlink(missing_ok=True)


LOGS = ("metrics.jsonl", "spans.jsonl")


def restart_from_config(run_dir: Path, config: dict[str, Any] | None = None) -> None:
    """Empty the logs of a run that stopped before its first checkpoint, so that it can
    start over from its config.json (the lock is held: nobody else writes them). Rows
    written before the kill describe a run that is being redone; they would repeat.
    ``config``: config.json with the resumable fields the caller changed, to record."""
    warnings.warn(
        f"resume: {str(run_dir)!r} stopped before its first checkpoint; starting it over "
        "from its config.json (its earlier log rows are discarded)",
        RuntimeWarning,
        stacklevel=3,
    )
    for name in LOGS:
        path = Path(run_dir) / name
        if path.is_file() and not path.is_symlink():
            path.write_bytes(b"")
    if config is not None:
        from hybrid.tracking import write_json_atomic

        write_json_atomic(Path(run_dir) / "config.json", config)


def check_scheduler_named_again(stored: str, given: str) -> None:
    """A run directory is data: a scheduler it names by a path (``file.py:Class`` or
    ``module:Class``) is code, and a resume imports it only when the user names the same
    scheduler again (``--scheduler``): a run directory from elsewhere runs nothing."""
    if not isinstance(stored, str) or ":" not in stored or given == stored:
        return
    from hybrid.errors import ConfigError

    raise ConfigError(
        f"scheduler: this run's config.json names the scheduler {stored!r}, code that a "
        f"resume runs only when you name it again: add --scheduler {stored!r} (or "
        f"scheduler={stored!r}) if you trust that file"
    )


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint files of a run, oldest first."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _NAME.search(p.name)]
    return sorted(found, key=lambda p: int(_NAME.search(p.name).group(1)))  # type: ignore[union-attr]


def load(path: Path) -> dict[str, Any]:
    """Load one checkpoint with ``weights_only=True``; unsafe or damaged files raise."""
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: refused: loading it would run code, not just read data ({first[:160]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError, IndexError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: corrupt or truncated ({first[:160]})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(f"{path}: not a hybrid checkpoint")
    return state


def load_latest(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The newest loadable checkpoint; a damaged newest one is reported with its predecessor."""
    candidates = list_checkpoints(run_dir)
    if not candidates:
        raise CheckpointError(f"resume: {str(run_dir)!r} holds no checkpoint")
    newest = candidates[-1]
    try:
        return newest, load(newest)
    except CheckpointError as exc:
        if len(candidates) < 2:
            raise
        previous = candidates[-2]
        raise CheckpointError(
            f"{exc}; the previous good checkpoint is {previous}: delete {newest.name} "
            "to resume from it"
        ) from None


# --- updates in flight ---------------------------------------------------------------------

PAYLOAD_DATACLASSES: dict[str, type] = {}
"""Dataclass payloads (an actor's ``Rollout``, ``multiagent``'s), by class name: each
registers itself where it is defined, so this module imports none of them."""


def register_payload(cls: type) -> type:
    """Let checkpoints restore updates whose payload is a ``cls`` (a dataclass)."""
    PAYLOAD_DATACLASSES[cls.__name__] = cls
    return cls


def update_to_state(update: Any) -> dict[str, Any]:
    """An ``Update`` (any payload: tensor, bytes, Rollout, transitions) as plain data."""
    state = {f.name: getattr(update, f.name) for f in dataclasses.fields(update)}
    state["kind"] = str(state["kind"].value if hasattr(state["kind"], "value") else state["kind"])
    payload = update.payload
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        state["payload"] = {
            "__dataclass__": type(payload).__name__,
            "fields": {f.name: getattr(payload, f.name) for f in dataclasses.fields(payload)},
        }
    return to_plain(state)


def update_from_state(state: dict[str, Any]) -> Any:
    from hybrid.protocol import Payload, Update

    values = from_plain(state)
    values["kind"] = Payload(values["kind"])
    payload = values["payload"]
    if isinstance(payload, dict) and "__dataclass__" in payload:
        name = payload["__dataclass__"]
        cls = PAYLOAD_DATACLASSES.get(name)
        if cls is None:
            raise CheckpointError(f"an update in flight has a payload of unknown type {name!r}")
        values["payload"] = cls(**payload["fields"])
    return Update(**values)
