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
import math
import os
import pickle
import re
import struct
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
    """Undo ``to_plain``; a damaged marker (``__tuple__`` that is no list, an object
    array whose shape does not fit its items) is a CheckpointError."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return _array_from_plain(value)
        if "__objects__" in value:
            return _objects_from_plain(value)
        if "__generator__" in value:
            return _generator_from_plain(value["__generator__"])
        if "__tuple__" in value:
            return tuple(from_plain(v) for v in items(value["__tuple__"], "a tuple"))
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
    generator = np.random.Generator(cls())
    set_generator_state(generator.bit_generator, state, "a random generator")
    return generator


def set_generator_state(bit_generator: np.random.BitGenerator, state: Any, where: str) -> None:
    """Set ``bit_generator``'s state from a checkpoint; a state numpy refuses (wrong
    generator, missing keys, a 400-digit seed) is a CheckpointError naming ``where``."""
    try:
        bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError) as exc:
        name = type(bit_generator).__name__
        raise CheckpointError(f"{where}: malformed {name} state ({_first_line(exc)})") from None


def _objects_from_plain(value: dict[str, Any]) -> np.ndarray:
    objects = items(value["__objects__"], "an object array")
    shape = counts(value.get("shape"), "an object array's shape")
    if math.prod(shape) != len(objects):
        raise invalid("an object array's shape", f"one that holds {len(objects)} items", shape)
    out = np.empty(len(objects), dtype=object)
    out[:] = [from_plain(v) for v in objects]
    return out.reshape(shape)


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


# --- validating what a checkpoint holds ------------------------------------------------------
# A checkpoint is read from disk: damaged, edited or made by someone else. Each structure
# in it is checked where it is read, with these, so that a wrong type, size or missing key
# is one line naming its place ("loop.stats.env_steps: expected ...") instead of a
# traceback deep in the run or, worse, a resume that silently continues from nonsense.

LARGEST_COUNT = 2**62
"""The largest step, version, offset or counter a checkpoint may hold. The loop itself
writes 2**62 as "never" (checkpoints turned off); anything larger is damage, not a run."""


def _shown(value: Any) -> str:
    """``value`` for a one-line message: a tensor by its shape, anything else shortened."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"an integer of {len(str(abs(value)))} digits"
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def invalid(where: str, expected: str, found: Any) -> CheckpointError:
    """The error for a value of the wrong kind: where it is, what fits, what was found."""
    return CheckpointError(f"{where}: expected {expected}, found {_shown(found)}")


def entry(table_: Any, key: str, where: str) -> Any:
    """``table_[key]``; a missing key (or no table at all) names its place."""
    if not isinstance(table_, dict):
        raise invalid(where, "a table", table_)
    if key not in table_:
        raise CheckpointError(f"{where}.{key}: missing")
    return table_[key]


def table(value: Any, where: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise invalid(where, "a table", value)
    return value


def items(value: Any, where: str, length: int | None = None) -> list[Any]:
    """A list (or tuple) of ``length`` items when given."""
    if not isinstance(value, list | tuple):
        raise invalid(where, "a list", value)
    if length is not None and len(value) != length:
        raise invalid(where, f"a list of {length} items", value)
    return list(value)


def count(value: Any, where: str) -> int:
    """A whole number from 0 to LARGEST_COUNT (True is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LARGEST_COUNT:
        raise invalid(where, "a whole number from 0 to 2**62", value)
    return value


def real(value: Any, where: str, minimum: float | None = None, finite: bool = True) -> float:
    """A finite number (``minimum`` or more when given); ``finite=False`` also lets nan and
    ±inf through (what an environment reported, not a counter the run relies on)."""
    fits = isinstance(value, int | float) and not isinstance(value, bool)
    if fits and isinstance(value, int):
        fits = abs(value) <= 2**1023  # float() of a larger integer overflows
    if fits and finite:
        fits = math.isfinite(value) and (minimum is None or value >= minimum)
    if not fits:
        bound = f" ≥ {minimum:g}" if minimum is not None else ""
        raise invalid(where, f"a finite number{bound}" if finite else "a number", value)
    return float(value)


def reals(value: Any, where: str, finite: bool = True) -> list[float]:
    return [real(v, f"{where}[{i}]", finite=finite) for i, v in enumerate(items(value, where))]


def counts(value: Any, where: str) -> list[int]:
    return [count(v, f"{where}[{i}]") for i, v in enumerate(items(value, where))]


def tensor(value: Any, where: str, numel: int | None = None) -> torch.Tensor:
    """A floating-point tensor of ``numel`` entries when given."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise invalid(where, "a floating-point tensor", value)
    if numel is not None and value.numel() != numel:
        raise invalid(where, f"{numel} numbers", value)
    return value


def plain_data(value: Any, where: str, depth: int = 0) -> None:
    """JSON-like data only (what config.json can hold): no tensors, nothing nested deep."""
    if depth > 8:
        raise CheckpointError(f"{where}: nested deeper than a config is")
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise invalid(where, "names (text) as keys", key)
            plain_data(inner, f"{where}.{key}", depth + 1)
    elif isinstance(value, list | tuple):
        for i, inner in enumerate(value):
            plain_data(inner, f"{where}[{i}]", depth + 1)
    elif value is not None and not isinstance(value, bool | int | float | str):
        raise invalid(where, "a setting (text, number, true/false, list or table)", value)


# --- optimizer state -----------------------------------------------------------------------------
# torch's Optimizer.load_state_dict checks only that each parameter group has as many
# parameters as the live one. A parameter whose state (or one moment of it) is missing is
# taken for one that has not stepped yet, and its moments restart from zero; a moment of
# the wrong shape fails at the next step, deep in the run; a nan one poisons θ. Each would
# make the resumed run silently differ from the uninterrupted one, so a checkpoint's
# optimizer state is checked against the optimizer it is about to be loaded into.


def check_optimizer_state(
    saved: Any, optimizer: torch.optim.Optimizer, where: str, steps: int | None = None
) -> None:
    """Check ``saved`` (an ``optimizer.state_dict()`` read from a checkpoint) against the
    live ``optimizer`` before ``optimizer.load_state_dict(saved)``; anything that does not
    fit is a CheckpointError naming its place under ``where``.

    The parameter groups must be the live ones (as many, the same parameter ids, every
    hyperparameter of the kind the live group holds). Each parameter's state must hold
    exactly the entries that this optimizer creates on a step of those parameters (found by
    taking one, on a copy: a new optimizer type is checked without a list to update here),
    each moment a finite floating-point tensor shaped like its parameter, ``step`` a whole
    number, the same for every parameter. The optimizer steps all its parameters together
    (hybrid's models are one flat θ; a step gives every parameter its state), so either all
    have state or none does. ``steps``: how many steps the optimizer has taken, when the
    caller knows (the global model's version when the server alone steps it): then every
    parameter's state must be there once it is more than 0, and its ``step`` equal it."""
    saved = table(saved, where)
    live_groups = optimizer.state_dict()["param_groups"]
    groups = items(entry(saved, "param_groups", where), f"{where}.param_groups")
    if len(groups) != len(live_groups):
        raise CheckpointError(
            f"{where}.param_groups: {len(groups)} groups, but the optimizer has {len(live_groups)}"
        )
    probe = _stepped_copy(optimizer)
    probes = [p for group in probe.param_groups for p in group["params"]]
    expected = [dict(probe.state.get(p, {})) for p in probes]
    # what torch's load_state_dict makes of the saved groups: it fills in an option that a
    # checkpoint of an older torch lacks with its default, as it would for the live one
    defaulted = _groups_as_loaded(probe, groups)
    ids: list[int] = []
    for i, (group, live) in enumerate(zip(groups, live_groups, strict=True)):
        here = f"{where}.param_groups[{i}]"
        table(group, here)
        saved_ids = counts(entry(group, "params", here), f"{here}.params")
        if saved_ids != live["params"]:
            raise invalid(f"{here}.params", f"the optimizer's ids {live['params']}", saved_ids)
        ids += saved_ids
        for key, value in live.items():
            if key != "params":
                found = group[key] if key in group else defaulted[i].get(key, _MISSING)
                if found is _MISSING:
                    raise CheckpointError(f"{here}.{key}: missing")
                _same_kind(found, value, f"{here}.{key}")
    states = table(entry(saved, "state", where), f"{where}.state")
    unknown = [k for k in states if isinstance(k, bool) or not isinstance(k, int) or k not in ids]
    if unknown:
        raise CheckpointError(
            f"{where}.state: holds {_shown(unknown[0])}, which is no parameter of the optimizer"
        )
    if not any(expected):  # this optimizer keeps no state (SGD without momentum)
        if states:
            raise CheckpointError(
                f"{where}.state: holds state for parameter {_shown(next(iter(states)))}, "
                f"which {type(optimizer).__name__} with these options never keeps"
            )
        return
    having = [pid for pid in ids if pid in states]
    if steps is not None:
        # with no step yet the state may still be there, made up front (Hogwild!'s shared
        # statistics): its step is then checked to be 0
        if steps > 0 and len(having) < len(ids):
            missing = next(pid for pid in ids if pid not in states)
            raise CheckpointError(
                f"{where}.state[{missing}]: missing (the optimizer has taken {steps} steps)"
            )
    elif having and len(having) < len(ids):
        missing = next(pid for pid in ids if pid not in states)
        raise CheckpointError(
            f"{where}.state[{missing}]: missing (parameter {having[0]} has state: every "
            "parameter gets its state on the same step)"
        )
    first_step: tuple[int, int] | None = None
    for pid, model in zip(ids, expected, strict=True):
        if pid not in states:
            continue
        here = f"{where}.state[{pid}]"
        state = table(states[pid], here)
        for key in model:
            if key not in state:
                raise CheckpointError(f"{here}.{key}: missing")
        extra = [key for key in state if key not in model]
        if extra:
            raise CheckpointError(
                f"{here}: holds {_shown(extra[0])}, which {type(optimizer).__name__} does not keep"
            )
        for key, value in model.items():
            if key == "step":
                step = _whole_step(state[key], f"{here}.step")
                if steps is not None and step != _counted(steps, state[key]):
                    raise CheckpointError(
                        f"{here}.step: {step}, but the optimizer has taken {steps} steps"
                    )
                if first_step is not None and step != first_step[1]:
                    raise CheckpointError(
                        f"{here}.step: {step}, but state[{first_step[0]}].step is "
                        f"{first_step[1]}: every parameter steps together"
                    )
                first_step = first_step or (pid, step)
            elif isinstance(value, torch.Tensor):
                moment = tensor(state[key], f"{here}.{key}")
                if moment.shape != value.shape:
                    raise invalid(
                        f"{here}.{key}", f"a tensor of shape {tuple(value.shape)}", moment
                    )
                if not bool(torch.isfinite(moment).all()):
                    raise CheckpointError(f"{here}.{key}: not all finite (nan or ±inf)")
            else:
                _same_kind(state[key], value, f"{here}.{key}")


_MISSING = object()


def _stepped_copy(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """An optimizer of ``optimizer``'s type and options over zero tensors shaped like its
    parameters, after one step: the state it holds is what a step of the live one makes."""
    groups = [
        {
            **{k: v for k, v in group.items() if k != "params"},
            "params": [
                torch.zeros(p.shape, dtype=p.dtype, requires_grad=p.requires_grad)
                for p in group["params"]
            ],
        }
        for group in optimizer.param_groups
    ]
    probe = type(optimizer)(groups, **optimizer.defaults)
    for group in probe.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p)
    from hybrid.core.global_model import plain_step  # the same state, without torch's wrappers

    with torch.no_grad():
        if not plain_step(probe):
            probe.step()
    return probe


def _groups_as_loaded(probe: torch.optim.Optimizer, groups: list[Any]) -> list[dict[str, Any]]:
    """The saved ``groups`` as torch's load_state_dict leaves them (with its defaults for
    options they lack), loaded into ``probe`` (whose state that replaces); ``{}`` for each
    when torch refuses them (the check of each option then says what is wrong)."""
    if not all(isinstance(group, dict) for group in groups):
        return [{} for _ in groups]
    shaped, offset = [], 0
    for group, live in zip(groups, probe.param_groups, strict=True):
        count_ = len(live["params"])  # torch numbers the parameters across the groups
        shaped.append({**group, "params": list(range(offset, offset + count_))})
        offset += count_
    try:
        probe.load_state_dict({"state": {}, "param_groups": shaped})
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, AttributeError):
        return [{} for _ in groups]
    return [dict(group) for group in probe.param_groups]


def _same_kind(found: Any, value: Any, where: str) -> None:
    """``found`` is of ``value``'s kind: true/false, a finite number, text, nothing, or a
    list of as many finite numbers (Adam's betas)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        kinds = {bool: "true or false", str: "text", type(None): "nothing (None)"}
        if type(found) is not type(value):
            raise invalid(where, kinds[type(value)], found)
    elif isinstance(value, int | float):
        real(found, where)
    elif isinstance(value, list | tuple):
        reals(items(found, where, length=len(value)), where)
    elif isinstance(value, torch.Tensor):
        tensor(found, where, numel=value.numel())
    elif type(found) is not type(value):
        raise invalid(where, f"a {type(value).__name__}", found)


def _whole_step(value: Any, where: str) -> int:
    """An optimizer's ``step``: torch keeps it in a one-number tensor (an int before 1.12)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
            raise invalid(where, "a whole number", value)
        number = value.item()
        if isinstance(number, float):
            if not math.isfinite(number) or number != int(number):
                raise invalid(where, "a whole number", number)
            number = int(number)
        return count(number, where)
    return count(value, where)


def _counted(steps: int, stored: Any) -> int:
    """What a ``step`` kept as ``stored`` reads after ``steps`` steps: a float32 step (torch's)
    counts whole numbers only up to 2**24, where ``step += 1`` stops changing it."""
    if isinstance(stored, torch.Tensor) and stored.is_floating_point():
        return min(steps, round(2 / torch.finfo(stored.dtype).eps))  # 2**24 for float32
    return steps


def check_state(state: dict[str, Any]) -> None:
    """The parts of a checkpoint every run writes (``Training.checkpoint``): their kinds
    and sizes. The components' own states (scheduler, learner, runtime, applier) are
    checked by each where it loads them; the loop's counters by the loop."""
    if state.get("format") != 1:
        raise invalid("format", "1 (the only checkpoint format)", state.get("format"))
    if "config" in state:  # older checkpoints do not record it
        plain_data(table(state["config"], "config"), "config")
    model = table(entry(state, "global_model", "checkpoint"), "global_model")
    params = entry(model, "params", "global_model")
    tensor(params, "global_model.params")
    if params.dim() != 1:
        raise invalid("global_model.params", "a flat vector", params)
    if not bool(torch.isfinite(params).all()):  # a run stops before it writes non-finite θ
        raise CheckpointError("global_model.params: not all finite (nan or ±inf)")
    count(entry(model, "version", "global_model"), "global_model.version")
    table(entry(model, "optimizer", "global_model"), "global_model.optimizer")
    for key in ("scheduler", "runtime", "loop", "logs"):
        table(entry(state, key, "checkpoint"), key)
    entry(state, "learner", "checkpoint")  # its learner checks its contents (None: no state)
    logs = state["logs"]  # Tracker.offsets: each log's length in bytes and in rows
    for name in LOGS:
        count(entry(logs, name, "logs"), f"logs.{name}")
    if "rows" in logs:  # older checkpoints count the rows again
        for name, rows in table(logs["rows"], "logs.rows").items():
            count(rows, f"logs.rows.{name}")
    if "applier" in state:  # older checkpoints have none
        table(state["applier"], "applier")
    if "scheduler_rng" in state:  # older checkpoints have none
        table(state["scheduler_rng"], "scheduler_rng")
    for i, pair in enumerate(
        items(entry(state, "scheduler_buffer", "checkpoint"), "scheduler_buffer")
    ):
        items(pair, f"scheduler_buffer[{i}]", length=2)


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
    except (
        RuntimeError,
        EOFError,
        zipfile.BadZipFile,
        OSError,
        ValueError,
        IndexError,
        struct.error,  # a pickle opcode whose argument the damaged file cut short
    ) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: corrupt or truncated ({first[:160]})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(f"{path}: not a hybrid checkpoint")
    return state


def load_latest(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The newest loadable checkpoint, its structures checked (``check_state``); a damaged
    newest one is reported with its predecessor."""
    candidates = list_checkpoints(run_dir)
    if not candidates:
        raise CheckpointError(f"resume: {str(run_dir)!r} holds no checkpoint")
    newest = candidates[-1]
    try:
        state = load(newest)
        try:
            check_state(from_plain(state))
        except CheckpointError as exc:
            raise CheckpointError(f"{newest}: {exc}") from None
        return newest, state
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


def update_from_state(state: dict[str, Any], where: str = "an update in flight") -> Any:
    """The ``Update`` ``update_to_state`` wrote; one that is damaged (a field missing or of
    the wrong kind, a field no update has) is a CheckpointError naming ``where``."""
    from hybrid.protocol import Payload, Update

    values = table(from_plain(state), where)
    known = {f.name for f in dataclasses.fields(Update)}
    unknown = sorted(str(key) for key in values if key not in known)
    if unknown:
        raise CheckpointError(f"{where}: holds {', '.join(unknown)[:80]}, which no update has")
    for key in ("worker_id", "base_version", "env_steps"):
        count(entry(values, key, where), f"{where}.{key}")
    kinds = [kind.value for kind in Payload]
    if values.get("kind") not in kinds:
        raise invalid(f"{where}.kind", f"one of {', '.join(kinds)}", values.get("kind"))
    values["kind"] = Payload(values["kind"])
    for key in ("nbytes", "task_index"):
        if key in values:
            count(values[key], f"{where}.{key}")
    for key in ("cost_s", "started_s", "upload_s"):
        if key in values:
            real(values[key], f"{where}.{key}")
    if "episode_returns" in values:
        reals(values["episode_returns"], f"{where}.episode_returns", finite=False)
    if "episode_lengths" in values:
        counts(values["episode_lengths"], f"{where}.episode_lengths")
    if "stats" in values:
        table(values["stats"], f"{where}.stats")
    if values.get("staleness") is not None:
        count(values["staleness"], f"{where}.staleness")
    payload = entry(values, "payload", where)
    if isinstance(payload, dict) and "__dataclass__" in payload:
        name = payload["__dataclass__"]
        cls = PAYLOAD_DATACLASSES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise CheckpointError(f"{where} has a payload of unknown type {str(name)[:80]!r}")
        fields = table(payload.get("fields"), f"{where}.payload.fields")
        names = {f.name for f in dataclasses.fields(cls)}
        if set(fields) != names:
            raise CheckpointError(
                f"{where}.payload.fields: a {name} has {', '.join(sorted(names))[:120]}"
            )
        values["payload"] = cls(**fields)
    return Update(**values)
