"""Environment construction: Gymnasium vector envs and a description of their spaces."""

from __future__ import annotations

import ast
import functools
import importlib
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from hybrid.atari import AtariSettings
from hybrid.errors import ConfigError
from hybrid.plugins import EnvFamily, env_families, resolve


@dataclass(frozen=True)
class EnvSettings:
    """How a run builds its envs beyond the id: what the assembly takes from the config."""

    wrappers: str = ""
    """``--wrappers``: applied to every env, in order."""
    atari: AtariSettings = field(default_factory=AtariSettings)
    spawned: bool = False
    """Workers run in spawned processes: factories and wrappers must pickle."""


@dataclass(frozen=True)
class EnvInfo:
    """What the core needs to know about a task before building models."""

    env_id: str
    obs_dim: int
    action_dim: int
    continuous: bool
    action_low: np.ndarray | None
    action_high: np.ndarray | None
    reward_threshold: float | None
    multiagent: bool = False
    """A PettingZoo env (multiagent/): obs_dim and action_dim are per agent, padded."""
    obs_shape: tuple[int, ...] = ()
    """The observation's shape before flattening (e.g. Atari's [4, 84, 84]); () = (obs_dim,).
    Rollouts keep observations flat; a model for images (the Nature CNN) reshapes them."""
    obs_dtype: str = "float32"
    """dtype workers store observations in: uint8 for images (4x smaller), else float32."""
    factory: Callable[[], Any] | None = None
    """The callable registered for this env id (register_env), carried to every worker so
    that a spawned process or a Ray actor builds the same env without the registry."""
    n_agents: int = 0
    """A PettingZoo env's agent slots (``possible_agents``); 0 for a Gymnasium env."""
    wrappers: tuple[tuple[str, Callable[..., Any]], ...] = ()
    """The registered wrappers (register_wrapper) the config names, carried the same way."""

    @property
    def image(self) -> bool:
        return len(self.obs_shape) == 3

    @property
    def obs_stats_shape(self) -> tuple[int, ...]:
        """Shape of the observation statistics (``--normalize-obs``): ``(obs_dim,)``, or
        ``(n_agents, obs_dim)`` on a multi-agent env (one row per agent slot)."""
        return (self.n_agents, self.obs_dim) if self.multiagent else (self.obs_dim,)


def env_family(env_id: str) -> EnvFamily | None:
    """The plug-in env family (``hybrid.plugins``) that claims ``env_id``; None for the ids
    Gymnasium or ``register_env`` knows. Namespaced Gymnasium ids (``ALE/Pong-v5``) are
    registered, so they stay Gymnasium's."""
    if env_id in _FACTORIES or env_id.startswith("ALE/") or env_id in gym.registry:
        return None
    return next((f for f in env_families() if f.claims(env_id)), None)


def is_multiagent_id(env_id: str) -> bool:
    """PettingZoo ids are ``package/module`` (the multiagent plug-in claims them)."""
    family = env_family(env_id)
    return family is not None and family.name == "multiagent"


def _needs_flatten(space: gym.Space) -> bool:
    return not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1)


def describe(env_id: str, settings: EnvSettings | None = None) -> EnvInfo:
    """Probe the env once; unknown ids and unsupported spaces become ConfigErrors.

    ``settings`` brings the wrappers (``--wrappers``) and the Atari settings, which can change
    the observation space.
    """
    family = env_family(env_id)
    if family is not None:
        return resolve(family.describe)(env_id)
    factory = resolve_factory(env_id)
    settings = settings or EnvSettings()
    wrappers = registered_wrappers(settings.wrappers)
    if wrappers and settings.spawned:
        try:  # like the factory: spawned workers receive them pickled (by reference)
            pickle.dumps(wrappers)
        except Exception as exc:
            raise ConfigError(
                f"wrappers: a registered wrapper cannot be sent to worker processes "
                f"({_first_line(exc)}); define it at module level, or use the serial or "
                "ray runtime"
            ) from None
    if factory is not None and settings.spawned:
        try:  # spawned worker processes receive the factory pickled (by reference)
            pickle.dumps(factory)
        except Exception as exc:
            raise ConfigError(
                f"env: the factory of {env_id!r} cannot be sent to worker processes "
                f"({_first_line(exc)}); define it at module level, or use the serial or "
                "ray runtime"
            ) from None
    env = make_env(env_id, settings, factory=factory, flatten=False)
    try:
        obs_space = env.observation_space
        obs_shape: tuple[int, ...] = ()
        if isinstance(obs_space, gym.spaces.Box):
            obs_shape = tuple(int(n) for n in obs_space.shape)
        image = len(obs_shape) == 3
        obs_dtype = "uint8" if image and obs_space.dtype == np.uint8 else "float32"
        if _needs_flatten(obs_space):
            obs_space = gym.spaces.flatten_space(obs_space)
        threshold = _FACTORIES[env_id][1] if env_id in _FACTORIES else None
        if threshold is None and env.spec is not None:
            threshold = env.spec.reward_threshold
        act_space = env.action_space
        if isinstance(act_space, gym.spaces.Discrete):
            return EnvInfo(
                env_id,
                int(np.prod(obs_space.shape)),
                int(act_space.n),
                False,
                None,
                None,
                threshold,
                obs_shape=obs_shape if image else (),
                obs_dtype=obs_dtype,
                factory=factory,
                wrappers=wrappers,
            )
        if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            return EnvInfo(
                env_id,
                int(np.prod(obs_space.shape)),
                int(act_space.shape[0]),
                True,
                act_space.low.astype(np.float32),
                act_space.high.astype(np.float32),
                threshold,
                obs_shape=obs_shape if image else (),
                obs_dtype=obs_dtype,
                factory=factory,
                wrappers=wrappers,
            )
        raise ConfigError(
            f"env: {env_id!r} has action space {act_space}; supported are Discrete and 1-D Box"
        )
    finally:
        env.close()


# --- environments: env factories, extras, wrappers from the config --------------

_FACTORIES: dict[str, tuple[Callable[[], Any], float | None]] = {}

# Ids that a package registers when imported, and the extra that installs it.
_PLUGINS = (("ALE/", "ale_py", "atari"), ("highway", "highway_env", "highway"))
# Gymnasium's own envs that need a physics engine from an extra.
_ENGINES = (("gymnasium.envs.mujoco", "mujoco"), ("gymnasium.envs.box2d", "box2d"))


def register_env(
    name: str, factory: Callable[[], Any], reward_threshold: float | None = None
) -> None:
    """Make ``name`` usable as ``TrainConfig.env``: each worker calls ``factory()`` for each
    of its envs, so no simulator state is ever shared between workers or envs.

    The factory travels to worker processes by pickling (a module-level function or a
    ``functools.partial`` of one; Ray also takes lambdas). ``reward_threshold`` stops the
    run when evaluation reaches it (else the env's spec, if it has one, decides).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"env: a registered env needs a non-empty string name, got {name!r}")
    if not callable(factory):
        raise ConfigError(
            f"env: the factory registered as {name!r} is {factory!r}, which is not callable; "
            "pass a function (or class) that returns a gymnasium.Env"
        )
    _FACTORIES[name] = (factory, reward_threshold)


def resolve_factory(env_id: str) -> Callable[[], Any] | None:
    """The registered factory of ``env_id``; ``module:name`` imports ``module`` first (where
    the module calls ``register_env``), as Gymnasium does for its own ids."""
    if env_id not in _FACTORIES and ":" in env_id:
        module = env_id.split(":", 1)[0]
        try:
            importlib.import_module(module)
        except Exception as exc:  # not only ImportError: '' or '..' are ValueErrors
            raise ConfigError(f"env: cannot import {module!r} for {env_id!r}: {exc}") from None
        if env_id.split(":", 1)[1] in _FACTORIES:
            return _FACTORIES[env_id.split(":", 1)[1]][0]
    entry = _FACTORIES.get(env_id)
    return entry[0] if entry is not None else None


def ensure_registered(env_id: str) -> None:
    """Import the package that registers ``env_id``; a missing extra names the extra."""
    if env_id in gym.registry or ":" in env_id:
        return
    for prefix, module, extra in _PLUGINS:
        if env_id.startswith(prefix):
            if extra == "atari":
                from hybrid.atari import register_atari

                register_atari(env_id)
                return
            try:
                importlib.import_module(module)
            except ImportError:
                raise ConfigError(
                    f"env: {env_id!r} needs the {extra} extra ({module}): "
                    f"pip install 'hybrid-rl[{extra}]'"
                ) from None
            return


def make_env(
    env_id: str,
    settings: EnvSettings | None = None,
    evaluation: bool = False,
    factory: Callable[[], Any] | None = None,
    flatten: bool = True,
) -> gym.Env:
    """One env: the registered factory, the Atari pipeline or ``gym.make``, then the
    config's wrappers, then (``flatten``) a flat observation for the rollout buffers."""
    if factory is None:
        factory = resolve_factory(env_id)
    if factory is not None:
        try:
            env = factory()
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"env: the factory of {env_id!r} raised {_first_line(exc)}") from None
        if not isinstance(env, gym.Env):
            raise ConfigError(
                f"env: the factory of {env_id!r} returned {type(env).__name__}, not a gymnasium.Env"
            )
    else:
        from hybrid.atari import is_atari, make_atari

        atari = settings.atari if settings is not None else None
        env = make_atari(env_id, atari, evaluation) if is_atari(env_id) else _gym_make(env_id)
    for wrapper, args, kwargs in parse_wrappers(settings.wrappers if settings else ""):
        try:
            env = wrapper(env, *args, **kwargs)
        except Exception as exc:
            raise ConfigError(
                f"wrappers: {getattr(wrapper, '__name__', wrapper)} cannot wrap {env_id!r}: "
                f"{_first_line(exc)}"
            ) from None
    if flatten and _needs_flatten(env.observation_space):
        env = gym.wrappers.FlattenObservation(env)
    return env


def _gym_make(env_id: str) -> gym.Env:
    ensure_registered(env_id)
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        raise ConfigError(
            f"env: {env_id!r} is not a registered Gymnasium id "
            "(e.g. CartPole-v1, Acrobot-v1, Pendulum-v1; gymnasium.pprint_registry() lists all; "
            "hybrid.envs.register_env adds your own)"
        ) from None
    try:
        return gym.make(env_id)
    except Exception as exc:  # a missing extra (box2d, mujoco) surfaces here
        entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
        for package, extra in _ENGINES:
            if entry.startswith(package):
                raise ConfigError(
                    f"env: {env_id!r} needs the {extra} extra: pip install 'hybrid-rl[{extra}]' "
                    f"({_first_line(exc)})"
                ) from None
        raise ConfigError(f"env: {env_id!r} cannot be created: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def parse_wrappers(text: str) -> list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]:
    """``"ClipReward(-1, 1); TimeAwareObservation"`` -> [(wrapper, args, kwargs), ...].

    Each item is a Gymnasium wrapper name (``gymnasium.wrappers``), a dotted path to a
    ``gymnasium.Wrapper`` subclass, or a name given to ``register_wrapper``, optionally called
    with literal arguments; anything else is refused. They wrap
    each env in order, after the env's own preprocessing (e.g. Atari's).
    """
    out = []
    for item in (part.strip() for part in str(text).split(";")):
        if not item:
            continue
        try:
            node = ast.parse(item, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise ConfigError(
                f"wrappers: cannot parse {item!r}; write Name or Name(literal arguments), "
                "separated by ';'"
            ) from None
        call = node if isinstance(node, ast.Call) else None
        target = call.func if call is not None else node
        path = _dotted(target)
        if path is None:
            raise ConfigError(f"wrappers: {item!r} is not a wrapper name (e.g. ClipReward(-1, 1))")
        try:
            args = tuple(ast.literal_eval(a) for a in call.args) if call else ()
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords} if call else {}
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise ConfigError(
                f"wrappers: the arguments of {item!r} must be literals (numbers, strings, ...)"
            ) from None
        if None in kwargs:
            raise ConfigError(f"wrappers: {item!r}: **kwargs is not supported")
        out.append((_wrapper_callable(path, item), args, kwargs))
    return out


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def register_wrapper(name: str, fn: Callable[..., Any]) -> None:
    """Make ``name`` usable in ``TrainConfig.wrappers``: ``fn(env, *args, **kwargs)`` must
    return the wrapped env. Only names registered here (besides ``gymnasium.Wrapper``
    subclasses) may appear, so a config file cannot chain arbitrary callables.

    ``fn`` travels to worker processes with the env's description, pickled like an env
    factory: a module-level function for ``processes`` (anything cloudpickle takes for Ray).
    """
    if not isinstance(name, str) or not _WRAPPER_NAME.fullmatch(name):
        raise ConfigError(
            f"wrappers: a registered wrapper needs a (dotted) identifier as its name, got {name!r}"
        )
    if not callable(fn):
        raise ConfigError(f"wrappers: the wrapper registered as {name!r} is {fn!r}, not callable")
    _WRAPPERS[name] = fn


_WRAPPERS: dict[str, Callable[..., Any]] = {}
_WRAPPER_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_ALLOWED = (
    "a gymnasium.wrappers name, a dotted path to a gymnasium.Wrapper subclass, or a callable "
    "registered with hybrid.envs.register_wrapper"
)


def registered_wrappers(text: str) -> tuple[tuple[str, Callable[..., Any]], ...]:
    """The (name, fn) pairs of ``register_wrapper`` that ``text`` names."""
    names = []
    for item in (part.strip() for part in str(text).split(";")):
        name = item.split("(", 1)[0].strip()
        if name in _WRAPPERS and name not in names:
            names.append(name)
    return tuple((name, _WRAPPERS[name]) for name in names)


def _is_env_wrapper(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, gym.Wrapper)


def _wrapper_callable(path: str, item: str) -> Callable[..., Any]:
    # Only env wrappers: a dotted path to any callable would let a config file (or a
    # resumed run's config.json) chain e.g. operator.add and os.system into a shell command.
    if path in _WRAPPERS:
        return _WRAPPERS[path]
    if "." not in path:
        wrapper = getattr(gym.wrappers, path, None)
        if not _is_env_wrapper(wrapper):
            raise ConfigError(
                f"wrappers: {path!r} is not a gymnasium.wrappers wrapper (e.g. ClipReward, "
                "NormalizeObservation, TimeLimit) nor registered with "
                "hybrid.envs.register_wrapper; a dotted path names a gymnasium.Wrapper subclass"
            )
        return wrapper  # type: ignore[return-value]
    module, _, attr = path.rpartition(".")
    try:
        wrapper = getattr(importlib.import_module(module), attr)
    except Exception as exc:  # a module that fails to import for any reason
        raise ConfigError(
            f"wrappers: cannot find {path!r} for {item!r}: {_first_line(exc)}"
        ) from None
    if not _is_env_wrapper(wrapper):
        raise ConfigError(f"wrappers: {path!r} is not allowed; use {_ALLOWED}")
    return wrapper


def _plain(env_id: str, settings: EnvSettings | None, factory: Callable[[], Any] | None) -> bool:
    """A registered id without wrappers: the original, fastest construction path."""
    from hybrid.atari import is_atari

    wrapped = settings is not None and bool(settings.wrappers)
    return factory is None and not is_atari(env_id) and not wrapped


def make_vector_env(
    env_id: str,
    num_envs: int,
    settings: EnvSettings | None = None,
    info: EnvInfo | None = None,
    evaluation: bool = False,
) -> gym.vector.VectorEnv:
    """A synchronous vector env that resets finished sub-envs in the same step.

    SAME_STEP autoreset keeps every stored transition real (NEXT_STEP would
    insert a dummy step after each episode) and hands back the final
    observation, which truncation bootstrapping needs.

    A PettingZoo id gives the multi-agent adapter's vector env (``[E, N, ...]``).
    Each sub-env is its own instance (its own simulator, e.g. a MuJoCo model and data),
    built by ``make_env`` from ``settings`` (wrappers, Atari settings) and ``info`` (a
    registered factory); ``evaluation`` builds the evaluator's (Atari: the game score).
    """
    family = env_family(env_id)
    if family is not None:
        return resolve(family.make_vector_env)(env_id, num_envs)  # type: ignore[no-any-return]
    factory = info.factory if info is not None and info.factory is not None else None
    factory = factory or resolve_factory(env_id)
    for name, fn in info.wrappers if info is not None else ():
        _WRAPPERS.setdefault(name, fn)  # a worker process: its registry starts empty
    if not _plain(env_id, settings, factory):
        return gym.vector.SyncVectorEnv(
            [functools.partial(make_env, env_id, settings, evaluation, factory)] * num_envs,
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
    ensure_registered(env_id)
    probe = gym.make(env_id)
    wrappers = [gym.wrappers.FlattenObservation] if _needs_flatten(probe.observation_space) else []
    probe.close()
    entry_point = gym.spec(env_id).entry_point
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        wrappers=wrappers,
        # Gymnasium's own envs pass its checker; the checker's wrapper stays in every step
        # (a tenth of a CartPole step's cost). Other envs keep it: it explains their bugs.
        disable_env_checker=isinstance(entry_point, str)
        and entry_point.startswith("gymnasium.envs."),
    )
