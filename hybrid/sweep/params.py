"""One swept parameter of a sweep file: its wandb distribution, checked (``_param``), and
the values it gives a grid or a draw. ``SweepError`` is the error every part of the sweep
raises."""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any


class SweepError(ValueError):
    """A sweep that cannot start. The message is one line; the CLI exits with code 2."""


# distribution: (required keys, optional keys); "distribution" itself is always allowed.
DISTRIBUTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "constant": (("value",), ()),
    "categorical": (("values",), ()),
    "categorical_w_probabilities": (("values", "probabilities"), ()),
    "int_uniform": (("min", "max"), ()),
    "uniform": (("min", "max"), ()),
    "q_uniform": (("min", "max"), ("q",)),
    "log_uniform": (("min", "max"), ()),
    "log_uniform_values": (("min", "max"), ()),
    "q_log_uniform": (("min", "max"), ("q",)),
    "q_log_uniform_values": (("min", "max"), ("q",)),
    "inv_log_uniform": (("min", "max"), ()),
    "inv_log_uniform_values": (("min", "max"), ()),
    "normal": ((), ("mu", "sigma")),
    "q_normal": ((), ("mu", "sigma", "q")),
    "log_normal": ((), ("mu", "sigma")),
    "q_log_normal": ((), ("mu", "sigma", "q")),
    "beta": ((), ("a", "b")),
    "q_beta": ((), ("a", "b", "q")),
}


# wandb's schema defaults. q defaults to the float 1.0, so an unquantized-looking
# q_uniform yields floats (3.0) exactly as it does online; give q: 1 for integers.
DEFAULTS = {"q": 1.0, "mu": 0.0, "sigma": 1.0, "a": 1.0, "b": 1.0}


CONTINUOUS_DIGITS = 4


@dataclass(frozen=True)
class Param:
    """One swept TrainConfig field: its distribution and that distribution's settings."""

    name: str
    distribution: str
    spec: dict[str, Any]

    def grid_values(self) -> Sequence[Any]:
        """The values a grid search enumerates, in order, duplicates dropped (as wandb does).

        A lazy sequence for ranges: ``seed: {min: 0, max: 100000000000}`` has a length
        without holding 10^11 values.
        """
        d, s = self.distribution, self.spec
        if d == "constant":
            return [s["value"]]
        if d == "categorical":
            return _unique(s["values"])
        if d == "int_uniform":
            return range(s["min"], s["max"] + 1)
        if d == "q_uniform":
            # wandb's grid uses np.arange(min, max, q): max itself is excluded.
            return _Arange(s["min"], s["max"], s["q"])
        raise SweepError(
            f"{self.name}: a grid cannot enumerate the {d} distribution; "
            "use values, int_uniform or q_uniform, or method: random"
        )

    def fixed(self) -> bool:
        """True when every draw gives the same value (it is then left out of run names)."""
        d, s = self.distribution, self.spec
        if d == "constant":
            return True
        if d in ("categorical", "categorical_w_probabilities"):
            return len(_unique(s["values"])) == 1
        return False

    def draw(self, u: float) -> Any:
        """The value at quantile ``u`` in [0, 1): inverse-CDF sampling, as wandb's sweeps do.

        Continuous draws are rounded to 4 significant digits, so a run's directory name
        states its exact value (1e-4 vs 1.0000000000000002e-4 never matters to a search).
        """
        d, s = self.distribution, self.spec
        if d == "constant":
            return s["value"]
        if d == "categorical":
            values = s["values"]
            return values[min(int(u * len(values)), len(values) - 1)]
        if d == "categorical_w_probabilities":
            total = float(sum(s["probabilities"]))
            cumulative = itertools.accumulate(p / total for p in s["probabilities"])
            index = next((i for i, c in enumerate(cumulative) if u < c), len(s["values"]) - 1)
            return s["values"][index]
        if d == "int_uniform":
            return min(s["min"] + int(u * (s["max"] - s["min"] + 1)), s["max"])
        if d in ("normal", "q_normal", "log_normal", "q_log_normal"):
            x = _normal_ppf(u, s["mu"], s["sigma"])
            x = math.exp(x) if "log" in d else x
            return _quantize(x, s["q"]) if d.startswith("q_") else _continuous(x)
        if d in ("beta", "q_beta"):
            from scipy.stats import beta

            x = float(beta.ppf(u, s["a"], s["b"]))
            return _quantize(x, s["q"]) if d == "q_beta" else _continuous(x)
        lo, hi = s["min"], s["max"]
        if d in ("uniform", "q_uniform"):
            x = lo + u * (hi - lo)
        elif d in ("log_uniform", "q_log_uniform"):
            x = math.exp(lo + u * (hi - lo))  # min and max are natural-log exponents
        elif d in ("log_uniform_values", "q_log_uniform_values"):
            x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        elif d == "inv_log_uniform":
            x = math.exp(-(lo + (1 - u) * (hi - lo)))  # min and max bound log(1/x)
        else:  # inv_log_uniform_values
            x = math.exp(-(-math.log(hi) + (1 - u) * (math.log(hi) - math.log(lo))))
        return _quantize(x, s["q"]) if d.startswith("q_") else _continuous(x)


class _Arange(Sequence[Any]):
    """``np.arange(start, stop, step).tolist()`` (cleaned of float artefacts), computed per item."""

    def __init__(self, start: int | float, stop: int | float, step: int | float) -> None:
        self.start, self.step = start, step
        self.ints = all(isinstance(v, int) for v in (start, stop, step))
        self.n = max(0, math.ceil((stop - start) / step))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        value = self.start + (i % self.n) * self.step
        return value if self.ints else _clean(float(value))


def _normal_ppf(u: float, mu: float, sigma: float) -> float:
    if sigma == 0:
        return float(mu)
    return NormalDist(mu, sigma).inv_cdf(min(max(u, 1e-12), 1 - 1e-12))


def _continuous(x: float) -> float:
    return float(f"{x:.{CONTINUOUS_DIGITS}g}")


def _quantize(x: float, q: float) -> int | float:
    # wandb: round(x / q) * q, an integer when q is an integer.
    steps = round(x / q)
    return steps * q if isinstance(q, int) else _clean(steps * q)


def _clean(x: float) -> float:
    # 0.30000000000000004 -> 0.3: arange/quantize artefacts would make ugly, unstable names.
    return float(f"{x:.12g}")


def _unique(values: Sequence[Any]) -> list[Any]:
    # By type and repr, not ==: True == 1 and 1 == 1.0, but they are different flags.
    seen: set[tuple[str, str]] = set()
    out = []
    for v in values:
        key = (type(v).__name__, repr(v))
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _param(where: str, name: str, spec: Any) -> Param:
    if not isinstance(spec, dict):
        raise SweepError(
            f"{where}: expected a mapping such as {{value: {spec!r}}} or {{values: [...]}}"
        )
    if "parameters" in spec:
        raise SweepError(f"{where}: nested parameters do not fit TrainConfig, which is flat")
    distribution = spec.get("distribution") or _infer(where, spec)
    if distribution not in DISTRIBUTIONS:
        raise SweepError(
            f"{where}: unknown distribution {distribution!r}{_suggest(distribution, DISTRIBUTIONS)}"
        )
    required, optional = DISTRIBUTIONS[distribution]
    allowed = {"distribution", *required, *optional}
    for key in spec:
        if key not in allowed:
            raise SweepError(
                f"{where}: {key!r} does not belong to a {distribution} parameter "
                f"(it takes {', '.join(sorted(allowed - {'distribution'}))})"
            )
    for key in required:
        if key not in spec:
            raise SweepError(f"{where}: a {distribution} parameter needs {key}:")
    full = {k: spec.get(k, DEFAULTS.get(k)) for k in (*required, *optional)}
    for key in ("min", "max", "q", "mu", "sigma", "a", "b"):
        if key in full:
            _number(where, key, full[key])
    if "values" in full:
        if not isinstance(full["values"], list):
            raise SweepError(f"{where}: values must be a list, got {full['values']!r}")
        if not full["values"]:
            raise SweepError(f"{where}: values: [] is empty; give at least one value")
    if distribution == "categorical_w_probabilities":
        probs = full["probabilities"]
        if not isinstance(probs, list) or len(probs) != len(full["values"]):
            raise SweepError(f"{where}: give one probability per value")
        for p in probs:
            _number(where, "probabilities", p)
        if any(p < 0 for p in probs) or sum(probs) <= 0:
            raise SweepError(f"{where}: probabilities must be >= 0 and not all 0")
    if distribution == "int_uniform" and not (_is_int(full["min"]) and _is_int(full["max"])):
        raise SweepError(f"{where}: int_uniform needs integer min and max")
    if "min" in full and full["min"] > full["max"]:
        raise SweepError(f"{where}: min {full['min']} is above max {full['max']}")
    if distribution.endswith("_values") and full["min"] <= 0:
        raise SweepError(f"{where}: {distribution} needs min > 0 (it samples log(min)..log(max))")
    if "q" in full and full["q"] <= 0:
        raise SweepError(f"{where}: q must be > 0")
    if "sigma" in full and full["sigma"] < 0:
        raise SweepError(f"{where}: sigma must be >= 0")
    param = Param(name, distribution, full)
    _check_draws(where, param)
    return param


_PROBE_QUANTILES = (0.0, 0.5, 1.0 - 1e-12)
"""Where a distribution is drawn to prove it fits a float: its extremes (as far as a draw
goes) and its middle. exp() and the quantize steps are monotone, so the extremes bound the
rest."""


def _check_draws(where: str, param: Param) -> None:
    """Refuse a distribution whose draws overflow a float (``log_uniform`` max 1000 is
    e^1000; ``log_normal`` mu 1000 likewise) or whose grid or quantization steps cannot be
    counted (``q_uniform`` q 1e-300), instead of failing in the middle of a sweep."""
    d, s = param.distribution, param.spec
    if d in ("constant", "categorical", "categorical_w_probabilities"):
        return
    if d == "q_uniform":  # a grid enumerates its steps
        steps = (float(s["max"]) - float(s["min"])) / float(s["q"])
        if not math.isfinite(steps) or steps > MAX_STEPS:
            raise SweepError(
                f"{where}: q: {s['q']!r} cuts [{s['min']}, {s['max']}] into more than "
                f"{MAX_STEPS:.0e} steps; use a larger q"
            )
    for u in _PROBE_QUANTILES:
        try:
            value = param.draw(u)
        except (OverflowError, ValueError, ZeroDivisionError) as exc:
            raise SweepError(
                f"{where}: the {d} distribution's draws overflow a float ({exc}); "
                f"{_overflow_hint(d)}"
            ) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise SweepError(f"{where}: the {d} distribution draws {value}; {_overflow_hint(d)}")
        if isinstance(value, int) and abs(value) > 2**62:
            raise SweepError(
                f"{where}: the {d} distribution draws {value:.3e}, beyond what any field takes; "
                f"{_overflow_hint(d)}"
            )


MAX_STEPS = 1e15
"""The most quantization steps a ``q_`` distribution may have between min and max."""


def _overflow_hint(distribution: str) -> str:
    if distribution in ("log_uniform", "q_log_uniform", "inv_log_uniform"):
        return (
            "its min and max are natural-log exponents (max 10 is e^10 = 22026); keep them "
            "within +-700"
        )
    if "log_normal" in distribution:
        return "its mu and sigma are in log space: exp(mu + 7 sigma) must stay below 1e308"
    return "narrow min and max, or use a larger q"


def _infer(where: str, spec: dict[str, Any]) -> str:
    # wandb's rules when distribution: is left out.
    if "value" in spec:
        return "constant"
    if "values" in spec:
        return "categorical_w_probabilities" if "probabilities" in spec else "categorical"
    if "min" in spec and "max" in spec:
        both_int = _is_int(spec["min"]) and _is_int(spec["max"])
        return "int_uniform" if both_int else "uniform"
    raise SweepError(f"{where}: give value:, values: [...], or min: and max: (or a distribution:)")


def _number(where: str, key: str, value: Any) -> None:
    if _is_int(value) or (isinstance(value, float) and math.isfinite(value)):
        return
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            raise SweepError(
                f"{where}: {key}: {value!r} is text: YAML reads 1e-4 as a string; "
                "write 1.0e-4 (wandb rejects it too)"
            )
    raise SweepError(f"{where}: {key} must be a finite number, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
