"""Simulated edge clients: who each one is, and the environment variant it runs.

A client is a profile, not an object that lives through the run: its env variant
(non-IID dynamics), device speed, links, dropout probability and availability are
drawn once from the run's seed, and everything else (env, model, optimizer) is built
from the profile when the client is given a task and released afterwards. A study
of 1,000 clients therefore holds 1,000 small profiles and the envs and models of the
clients of one round, never 1,000 envs.

Dynamics are drawn per client, uniformly over the ranges of a named distribution
(``client_dynamics``), and applied by setting the physical attributes of the
unwrapped Gymnasium env. CartPole's ``length`` is Gymnasium's attribute, which its
source documents as half the pole's length (default 0.5): ``pole_length`` draws it
from 0.25 to 1.0. ``iid`` leaves every client on the default env: the control.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from hybrid.errors import ConfigError
from hybrid.seeding import int_seed, stream

if TYPE_CHECKING:
    import torch

# Top-level spawn key of every federated stream: far from hybrid.seeding's small keys.
FEDERATED = 0xFED
# Sub-streams. Each quantity has its own, so changing one distribution leaves the others.
DYNAMICS_STREAM, SPEED_STREAM, LINK_STREAM, SAMPLING_STREAM, JITTER_STREAM, EVAL_STREAM = range(6)
BYZANTINE_STREAM, ATTACK_NOISE_STREAM, DP_NOISE_STREAM = 6, 7, 8

DELTA_ATTACKS = ("sign_flip", "scale", "gaussian")
"""Attacks on the Δ a Byzantine client sends (byzantine_scale s sets their strength):
sign_flip sends −s·Δ, scale sends s·Δ (model replacement), gaussian replaces Δ by Gaussian
noise with s times Δ's root-mean-square per coordinate."""
ENV_ATTACKS = ("random_policy", "reward_flip")
"""Attacks through the client's env, the Δ then computed honestly: random_policy steps the env
with uniformly random actions instead of the policy's (FedPG-BR's random-action agent; the
client's loss still scores the actions its policy chose), reward_flip negates every reward."""
ATTACKS = DELTA_ATTACKS + ENV_ATTACKS

Range = tuple[float, float]

CARTPOLE_RANGES: dict[str, Range] = {
    "length": (0.25, 1.0),  # half the pole length in m (Gymnasium's attribute; default 0.5)
    "masscart": (0.5, 2.0),  # kg, default 1.0
    "gravity": (4.9, 14.7),  # m/s^2, 0.5x to 1.5x the default 9.8
}
PENDULUM_RANGES: dict[str, Range] = {
    "m": (0.5, 1.5),  # kg, default 1.0
    "l": (0.5, 1.5),  # m, default 1.0
    "g": (5.0, 15.0),  # m/s^2, default 10.0
}

DYNAMICS: dict[str, dict[str, dict[str, Range]]] = {
    "iid": {},  # every client on the default env, whatever the env
    "pole_length": {"CartPole-v1": {"length": CARTPOLE_RANGES["length"]}},
    "cart_mass": {"CartPole-v1": {"masscart": CARTPOLE_RANGES["masscart"]}},
    "mass": {
        "CartPole-v1": {"masscart": CARTPOLE_RANGES["masscart"]},
        "Pendulum-v1": {"m": PENDULUM_RANGES["m"]},
    },
    "length": {
        "CartPole-v1": {"length": CARTPOLE_RANGES["length"]},
        "Pendulum-v1": {"l": PENDULUM_RANGES["l"]},
    },
    "gravity": {
        "CartPole-v1": {"gravity": CARTPOLE_RANGES["gravity"]},
        "Pendulum-v1": {"g": PENDULUM_RANGES["g"]},
    },
    "all": {"CartPole-v1": CARTPOLE_RANGES, "Pendulum-v1": PENDULUM_RANGES},
}
"""Named distributions: name -> env id -> physical attribute -> uniform (low, high)."""


def check_dynamics(name: str, env_id: str) -> None:
    """Raise a one-line ConfigError unless ``name`` is a distribution defined for ``env_id``."""
    if name not in DYNAMICS:
        raise ConfigError(f"client_dynamics: unknown {name!r}; choose one of {', '.join(DYNAMICS)}")
    if name != "iid" and env_id not in DYNAMICS[name]:
        raise ConfigError(
            f"client_dynamics: {name!r} has no ranges for {env_id!r}; it is defined for "
            f"{', '.join(DYNAMICS[name])} (iid runs on every env)"
        )


def dynamics_ranges(name: str, env_id: str) -> dict[str, Range]:
    check_dynamics(name, env_id)
    return DYNAMICS[name].get(env_id, {})


@dataclass(frozen=True)
class ClientProfile:
    """One edge client, as drawn from the run's seed."""

    client_id: int
    dynamics: tuple[tuple[str, float], ...]
    """Physical attributes of its env variant that differ from the default (empty: default)."""
    slowness: float
    """Device time factor: 1 is nominal, 4 a device four times slower."""
    uplink_mbps: float
    downlink_mbps: float
    dropout: float
    """Probability that the client drops out of a round it was sampled for."""
    availability: float
    """Probability that the client can be sampled in a round."""
    attack: str = ""
    """Empty for an honest client; a Byzantine one's attack (``ATTACKS``)."""

    @property
    def physics(self) -> dict[str, float]:
        return dict(self.dynamics)


@dataclass(frozen=True)
class ClientSettings:
    """What draws the run's client profiles and prices a client's task (the assembly fills it
    from the config, whose defaults are the ones). Frozen and hashable: the profile draw is
    cached by it."""

    seed: int
    env: str
    workers: int
    clients: int | None
    client_dynamics: str
    cluster: str
    speed_sigma: float
    straggler_fraction: float
    straggler_slowdown: float
    client_uplink_mbps: float
    client_downlink_mbps: float
    client_link_sigma: float
    client_dropout: float
    client_availability: float
    byzantine_fraction: float
    """Share of the K clients that are Byzantine, round(fraction·K) of them, drawn by seed."""
    byzantine_attack: str
    byzantine_scale: float
    client_trace: str
    """A client trace file (hybrid/traces.py): its speeds and links replace the drawn ones."""
    # the virtual clock's costs of a client task (ClientCostModel); not part of the draw
    step_cost_s: float
    task_overhead_s: float
    jitter_sigma: float


def population(settings: ClientSettings) -> int:
    """How many worker ids the run has: its K clients, or its workers."""
    return settings.clients if settings.clients is not None else settings.workers


def make_profiles(settings: ClientSettings) -> tuple[ClientProfile, ...]:
    """The run's client profiles, ids 0..K-1; the same settings always draw the same ones."""
    return _profiles(_profile_key(settings))


def client_profile(settings: ClientSettings, client_id: int) -> ClientProfile:
    return make_profiles(settings)[client_id]


_PROFILE_FIELDS = (
    "seed",
    "env",
    "workers",
    "clients",
    "client_dynamics",
    "cluster",
    "speed_sigma",
    "straggler_fraction",
    "straggler_slowdown",
    "client_uplink_mbps",
    "client_downlink_mbps",
    "client_link_sigma",
    "client_dropout",
    "client_availability",
    "byzantine_fraction",
    "byzantine_attack",
    "client_trace",
)


def _profile_key(settings: ClientSettings) -> tuple[Any, ...]:
    return tuple(getattr(settings, name) for name in _PROFILE_FIELDS)


@functools.lru_cache(maxsize=8)
def _profiles(key: tuple[Any, ...]) -> tuple[ClientProfile, ...]:
    # Cached: every on-demand client build looks its profile up, and a draw for K=1,000
    # clients is cheap but not free. The key holds every field the draw reads.
    f = dict(zip(_PROFILE_FIELDS, key, strict=True))
    k = f["clients"] if f["clients"] is not None else f["workers"]
    seed = f["seed"]

    ranges = dynamics_ranges(f["client_dynamics"], f["env"])
    rng = np.random.default_rng(stream(seed, FEDERATED, DYNAMICS_STREAM))
    # Sorted names: the draw does not depend on the order the table lists them in.
    draws = {name: rng.uniform(*ranges[name], size=k) for name in sorted(ranges)}

    rng = np.random.default_rng(stream(seed, FEDERATED, SPEED_STREAM))
    slowness = np.ones(k)
    if f["cluster"] == "heterogeneous":
        slowness = rng.lognormal(0.0, f["speed_sigma"], size=k)
    elif f["cluster"] == "stragglers":
        count = round(f["straggler_fraction"] * k)
        slowness[rng.choice(k, size=count, replace=False)] = f["straggler_slowdown"]

    rng = np.random.default_rng(stream(seed, FEDERATED, LINK_STREAM))
    sigma = f["client_link_sigma"]
    up = f["client_uplink_mbps"] * (rng.lognormal(0.0, sigma, size=k) if sigma else np.ones(k))
    down = f["client_downlink_mbps"] * (rng.lognormal(0.0, sigma, size=k) if sigma else np.ones(k))

    if f["client_trace"]:  # measured (or synthetic) devices instead of the drawn ones
        from hybrid.traces import load_trace

        rows = load_trace(f["client_trace"], k).clients
        slowness = np.array([1.0 / row.compute_speed for row in rows])
        up = np.array([row.uplink_mbps for row in rows])
        down = np.array([row.downlink_mbps for row in rows])

    attacks = [""] * k
    hostile = round(f["byzantine_fraction"] * k)
    if hostile:  # its own stream: the other draws are those of a run without attackers
        rng = np.random.default_rng(stream(seed, FEDERATED, BYZANTINE_STREAM))
        for c in rng.choice(k, size=hostile, replace=False):
            attacks[int(c)] = f["byzantine_attack"]

    return tuple(
        ClientProfile(
            client_id=c,
            dynamics=tuple((name, float(values[c])) for name, values in draws.items()),
            slowness=float(slowness[c]),
            uplink_mbps=float(up[c]),
            downlink_mbps=float(down[c]),
            dropout=float(f["client_dropout"]),
            availability=float(f["client_availability"]),
            attack=attacks[c],
        )
        for c in range(k)
    )


# --- env variants ------------------------------------------------------------------------------


def set_physics(env: gym.Env, physics: Mapping[str, float]) -> None:
    """Set physical attributes on an unwrapped env, and what the env derives from them."""
    for name, value in physics.items():
        if not hasattr(env, name):
            raise ValueError(f"{type(env).__name__} has no physical attribute {name!r}")
        setattr(env, name, float(value))
    if physics and hasattr(env, "polemass_length"):
        # CartPole caches these two in __init__ and reads only the cached values in step().
        env.total_mass = env.masspole + env.masscart
        env.polemass_length = env.masspole * env.length


def apply_dynamics(envs: gym.vector.VectorEnv, physics: Mapping[str, float]) -> None:
    """Give every sub-env of a synchronous vector env the same physics."""
    if not physics:
        return
    for env in _sub_envs(envs):
        set_physics(env.unwrapped, physics)


def apply_client_dynamics(
    envs: gym.vector.VectorEnv, settings: ClientSettings, client_id: int
) -> None:
    """Client ``client_id``'s env variant, and its env attack if it is a Byzantine one. An env
    lent by an earlier client first loses that client's attack wrapper."""
    profile = client_profile(settings, client_id)
    apply_dynamics(envs, profile.physics)
    if settings.byzantine_fraction > 0:
        set_env_attack(envs, profile.attack if profile.attack in ENV_ATTACKS else "")


class RandomActions(gym.Wrapper):
    """Steps the env with a uniformly random action, whatever the agent chose (seeded by the
    env's own reset seed, so a client's task is reproducible)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None or not hasattr(self, "random_space"):
            self.random_space = copy.deepcopy(self.env.action_space)
            self.random_space.seed(None if seed is None else seed + 1)
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        return self.env.step(self.random_space.sample())


class FlippedRewards(gym.Wrapper):
    """Negates every reward: a client that learns to fail."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, -reward, terminated, truncated, info


_ENV_ATTACK_WRAPPERS: dict[str, type[gym.Wrapper]] = {
    "random_policy": RandomActions,
    "reward_flip": FlippedRewards,
}


def set_env_attack(envs: gym.vector.VectorEnv, attack: str) -> None:
    """Wrap every sub-env of ``envs`` in ``attack``'s wrapper, after removing any attack
    wrapper they have ("": an honest client's envs)."""
    sub = _sub_envs(envs)
    wrapper_types = tuple(_ENV_ATTACK_WRAPPERS.values())
    for i, env in enumerate(sub):
        while isinstance(env, wrapper_types):
            env = env.env
        if attack:
            env = _ENV_ATTACK_WRAPPERS[attack](env)
        envs.envs[i] = env  # type: ignore[attr-defined]


def attack_delta(
    delta: torch.Tensor, attack: str, scale: float, seed: int, client_id: int, version: int
) -> torch.Tensor:
    """The Δ a Byzantine client sends in place of its honest ``delta`` (``DELTA_ATTACKS``);
    the env attacks and honest clients send ``delta`` itself."""
    import torch  # here: the config's checks import this module, and must not import torch

    if attack == "sign_flip":
        return -scale * delta
    if attack == "scale":
        return scale * delta
    if attack == "gaussian":
        seq = stream(seed, FEDERATED, ATTACK_NOISE_STREAM, client_id, max(version, 0))
        generator = torch.Generator().manual_seed(int_seed(seq))
        rms = torch.linalg.vector_norm(delta) / max(delta.numel(), 1) ** 0.5
        noise = torch.randn(delta.shape, generator=generator, dtype=delta.dtype)
        return scale * rms * noise
    return delta


def _sub_envs(envs: gym.vector.VectorEnv) -> list[gym.Env]:
    sub = getattr(envs, "envs", None)
    if sub is None:
        raise ValueError(
            f"{type(envs).__name__} does not expose its sub-envs; client dynamics need a "
            "synchronous vector env"
        )
    return list(sub)


# --- the virtual clock of a client task --------------------------------------------------------


class ClientCostModel:
    """A client task's virtual duration: download θ, compute, upload Δ.

    compute = (env steps × step cost + optimizer steps × task overhead) × device slowness ×
    jitter; download = θ's bytes / downlink; upload = the payload's bytes / uplink. The
    jitter of a (client, version) pair has its own stream, so no per-client state is kept.
    """

    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.profiles = make_profiles(settings)

    def duration(
        self,
        client_id: int,
        env_steps: int,
        nbytes: int,
        download_nbytes: int,
        updates: int,
        version: int,
    ) -> tuple[float, float]:
        """(download + compute seconds, upload seconds) of one task."""
        s, profile = self.settings, self.profiles[client_id]
        jitter = 1.0
        if s.jitter_sigma:
            # default_rng's own construction, without its argument checks: a generator per task
            seq = stream(s.seed, FEDERATED, JITTER_STREAM, client_id, max(version, 0))
            rng = np.random.Generator(np.random.PCG64(seq))
            jitter = float(rng.lognormal(0.0, s.jitter_sigma))
        compute = (env_steps * s.step_cost_s + updates * s.task_overhead_s) * profile.slowness
        download = download_nbytes * 8 / (profile.downlink_mbps * 1e6)
        upload = nbytes * 8 / (profile.uplink_mbps * 1e6)
        return float(download + compute * jitter), float(upload)


def clients_per_round(fraction: float, clients: int) -> int:
    """m = max(1, floor(C·K)) (McMahan et al. 2017); rounding noise in C·K is ignored."""
    return max(1, math.floor(fraction * clients + 1e-9))


__all__ = [
    "ATTACKS",
    "DELTA_ATTACKS",
    "DYNAMICS",
    "ENV_ATTACKS",
    "FEDERATED",
    "ClientCostModel",
    "ClientProfile",
    "apply_client_dynamics",
    "apply_dynamics",
    "attack_delta",
    "check_dynamics",
    "client_profile",
    "clients_per_round",
    "make_profiles",
    "population",
    "set_env_attack",
    "set_physics",
]
