"""The peers the performance targets name, measured on this machine today.

    .venv-peers/bin/python benchmarks/peers/measure.py [--only sb3 torchrl flower]
                                                       [--repeats 3] [--seeds 0 1 2 3 4] [--quick]

Run it with the peers' own venv (``make peers``): Flower pins a ray that conflicts with
hybrid's. Prints one JSON object per figure: name, value (median over repeats or seeds), unit,
repeats, runs (each run's value) and the settings. benchmarks/cartpole.py and
benchmarks/perf_compare.py call it once per repeat, interleaved with hybrid's own runs, and
put each figure next to hybrid's.

- ``sb3-solve``: Stable-Baselines3 A2C with rl-zoo's CartPole-v1 settings (8 envs, n_steps 5,
  RMSprop lr 7e-4, gae_lambda 1, ent_coef 0). Env steps and train wall seconds to solve under
  hybrid's protocol (benchmarks/cartpole.py, hybrid/evaluation.py): at the first update at or
  after every 2,500 env steps, 10 deterministic episodes on 10 envs reset with the same seeds
  each time; solved when their mean return is >= 475; evaluation time is not train wall.
- ``sb3-rate``: the same A2C, env steps per second of ``learn()`` at a fixed budget, no callback.
- ``torchrl``: ``MultiAsyncCollector``, 2 processes x 8 CartPole envs (a ``SerialEnv`` each,
  in-process as in hybrid's workers), hybrid's actor MLP sampling actions; collection only.
  Frames per second after the first batch, and start-up: from launching a fresh Python
  process to the first batch.
- ``flower``: a Flower simulation (Ray backend, Flower's default client resources): 100 virtual
  clients, 10 per round, each one local SGD step of hybrid's 4.6k-parameter actor MLP on
  synthetic data (no RL, no evaluation). Milliseconds per round (median of the rounds after
  the second), start-up (a fresh process's launch to the end of round 1), and the peak RSS
  summed over the process tree (the driver and Ray's processes).

``sb3`` means both sb3 figures. torch runs one thread, as hybrid does (``torch_threads`` is 1
by default): in this process, TorchRL's collector processes and Flower's clients.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

TORCH_THREADS = 1
"""hybrid's TrainConfig.torch_threads default; the peers get the same."""
ENV_ID = "CartPole-v1"
SOLVED_RETURN = 475.0
EVAL_EVERY = 2_500
EVAL_EPISODES = 10
A2C_SETTINGS: dict[str, Any] = {
    "n_envs": 8,
    "n_steps": 5,
    "learning_rate": 7e-4,
    "gae_lambda": 1.0,
    "ent_coef": 0.0,
    "optimizer": "RMSprop (SB3 default)",
}
"""rl-zoo's A2C hyperparameters for CartPole-v1; the rest are SB3's A2C defaults."""
HIDDEN, LAYERS = 64, 2
"""hybrid's actor for CartPole: two tanh layers of 64 (4 -> 64 -> 64 -> 2: 4,610 parameters)."""


def emit(name: str, runs: list[float], unit: str, settings: dict[str, Any]) -> None:
    """One figure as one JSON line: the median over runs, and every run's value."""
    finite = [r for r in runs if r != float("inf")]
    value = statistics.median(runs) if runs else None
    record = {
        "name": name,
        "value": None if value is None or value == float("inf") else value,
        "unit": unit,
        "repeats": len(runs),
        "runs": [r if r != float("inf") else None for r in runs],
        "settings": settings | {"torch_threads": TORCH_THREADS, "finite_runs": len(finite)},
    }
    print(json.dumps(record), flush=True)


# --- Stable-Baselines3 A2C ---------------------------------------------------------------------


def make_a2c(seed: int) -> Any:
    import torch
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(TORCH_THREADS)
    env = make_vec_env(ENV_ID, n_envs=A2C_SETTINGS["n_envs"], seed=seed)
    return A2C(
        "MlpPolicy",
        env,
        n_steps=A2C_SETTINGS["n_steps"],
        learning_rate=A2C_SETTINGS["learning_rate"],
        gae_lambda=A2C_SETTINGS["gae_lambda"],
        ent_coef=A2C_SETTINGS["ent_coef"],
        seed=seed,
        device="cpu",
        verbose=0,
    )


def sb3_solve(seed: int, budget: int) -> tuple[float, float]:
    """(env steps, train wall s) to solve under hybrid's evaluation protocol; inf if unsolved."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback

    model = make_a2c(seed)
    eval_envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(ENV_ID)] * EVAL_EPISODES,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    # The same seeds at every evaluation, as hybrid's Evaluator: evaluations differ only
    # through the parameters.
    eval_seeds = [int(s) for s in np.random.SeedSequence([seed, 475]).generate_state(10)]

    class Protocol(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval = EVAL_EVERY
            self.excluded_s = 0.0
            self.started = 0.0
            self.solved: tuple[int, float] | None = None
            self.last_eval_at = -1

        def _on_training_start(self) -> None:
            self.started = time.perf_counter()

        def evaluate(self) -> None:
            began = time.perf_counter()
            obs, _ = eval_envs.reset(seed=eval_seeds)
            returns = np.zeros(EVAL_EPISODES)
            running = np.ones(EVAL_EPISODES, dtype=bool)
            while running.any():
                action, _ = self.model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = eval_envs.step(action)
                returns += reward * running
                running &= ~(terminated | truncated)
            ended = time.perf_counter()
            self.last_eval_at = self.num_timesteps
            if self.solved is None and returns.mean() >= SOLVED_RETURN:
                wall = began - self.started - self.excluded_s
                self.solved = (self.num_timesteps, wall)
            self.excluded_s += ended - began

        def _on_rollout_start(self) -> None:
            # SB3 trains after each rollout and before the next one starts: here the
            # parameters include every update so far, as after hybrid's update at the same step.
            if self.num_timesteps >= self.next_eval:
                self.next_eval += EVAL_EVERY
                self.evaluate()

        def _on_step(self) -> bool:
            return self.solved is None  # False stops learn() once solved

        def _on_training_end(self) -> None:
            # hybrid evaluates the final parameters too when the budget ends between evaluations
            if self.solved is None and self.last_eval_at != self.num_timesteps:
                self.evaluate()

    protocol = Protocol()
    model.learn(total_timesteps=budget, callback=protocol)
    eval_envs.close()
    if protocol.solved is None:
        return float("inf"), float("inf")
    return float(protocol.solved[0]), protocol.solved[1]


def sb3_rate(seed: int, steps: int) -> float:
    """Env steps per second of A2C's learn() at a fixed budget, no callback."""
    model = make_a2c(seed)
    started = time.perf_counter()
    model.learn(total_timesteps=steps)
    return model.num_timesteps / (time.perf_counter() - started)


# --- TorchRL collector -------------------------------------------------------------------------


def make_serial_cartpoles() -> Any:
    from torchrl.envs import GymEnv, SerialEnv

    return SerialEnv(8, lambda: GymEnv(ENV_ID, categorical_action_encoding=True))


def torchrl_child(frames: int, frames_per_batch: int, launched: float) -> dict[str, float]:
    import torch
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.collectors import MultiAsyncCollector
    from torchrl.modules import ProbabilisticActor

    torch.set_num_threads(TORCH_THREADS)
    layers: list[nn.Module] = []
    width = 4
    for _ in range(LAYERS):
        layers += [nn.Linear(width, HIDDEN), nn.Tanh()]
        width = HIDDEN
    net = nn.Sequential(*layers, nn.Linear(width, 2))
    policy = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,  # hybrid's workers keep the behaviour log-probs too
    )
    collector = MultiAsyncCollector(
        [make_serial_cartpoles] * 2,
        policy,
        frames_per_batch=frames_per_batch,
        total_frames=frames,
        num_threads=TORCH_THREADS,
        num_sub_threads=TORCH_THREADS,
    )
    first_at = 0.0
    counted = 0
    for i, batch in enumerate(collector):
        if i == 0:
            first_at = time.time()
            continue  # the first batch is start-up's; the rate is the steady state after it
        counted += batch.numel()
    ended = time.time()
    collector.shutdown()
    return {"startup_s": first_at - launched, "frames_per_s": counted / (ended - first_at)}


# --- Flower simulation -------------------------------------------------------------------------


def tree_rss_mb(root: int) -> float:
    """RSS summed over ``root`` and its descendants (Ray's processes are), from /proc."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue  # a process that ended while we read
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(rss.get(pid, 0) for pid in tree) / 2**20


def flower_child(rounds: int, clients: int, per_round: int, launched: float) -> dict[str, float]:
    import logging

    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation
    from torch import nn

    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(TORCH_THREADS)

    def actor() -> nn.Module:
        return nn.Sequential(
            nn.Linear(4, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
            nn.Linear(HIDDEN, 2),
        )  # fmt: skip

    client_app = ClientApp()

    @client_app.train()
    def train(message: Message, context: Context) -> Message:
        torch.set_num_threads(TORCH_THREADS)  # Ray's actor processes start with torch's default
        model = actor()
        model.load_state_dict(message.content["arrays"].to_torch_state_dict())
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        # 5 samples: hybrid's fedavg client steps once on a rollout of 5 env steps
        obs, labels = torch.randn(5, 4), torch.randint(0, 2, (5,))
        loss = nn.functional.cross_entropy(model(obs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        content = RecordDict(
            {
                "arrays": ArrayRecord(model.state_dict()),
                "metrics": MetricRecord({"num-examples": 5, "loss": float(loss)}),
            }
        )
        return Message(content=content, reply_to=message)

    round_ends: list[float] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(
            fraction_train=per_round / clients, fraction_evaluate=0.0, min_train_nodes=per_round
        )

        def ended(server_round: int, arrays: ArrayRecord) -> None:
            if server_round:  # round 0 is the initial parameters, before any round
                round_ends.append(time.time())

        strategy.start(
            grid, ArrayRecord(actor().state_dict()), num_rounds=rounds, evaluate_fn=ended
        )

    peak = [0.0]
    done = threading.Event()

    def sample_rss() -> None:
        while not done.wait(0.25):
            peak[0] = max(peak[0], tree_rss_mb(os.getpid()))

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    run_simulation(server_app, client_app, num_supernodes=clients)
    done.set()
    sampler.join()
    steady = np.diff(round_ends[1:])  # rounds after the second: start-up costs are over
    return {
        "startup_s": round_ends[0] - launched,
        "round_ms": 1000 * float(np.median(steady)),
        "rss_mb": peak[0],
    }


# --- the command line --------------------------------------------------------------------------


def fresh_process(kind: str, *args: str) -> dict[str, float]:
    """One measurement in a new Python process: start-up includes the interpreter's and imports."""
    env = os.environ | {"OMP_NUM_THREADS": str(TORCH_THREADS), "WANDB_MODE": "offline"}
    launched = repr(time.time())
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, launched, *args],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"the {kind} measurement failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


CHILDREN: dict[str, Callable[..., dict[str, float]]] = {
    "torchrl": lambda launched, frames, batch: torchrl_child(int(frames), int(batch), launched),
    "flower": lambda launched, rounds, clients, per_round: flower_child(
        int(rounds), int(clients), int(per_round), launched
    ),
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, launched, *rest = sys.argv[2:]
        print(json.dumps(CHILDREN[kind](float(launched), *rest)), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    choices = ["sb3", "sb3-solve", "sb3-rate", "torchrl", "flower"]
    parser.add_argument("--only", nargs="+", choices=choices, default=["sb3", "torchrl", "flower"])
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (medians)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(5)), help="sb3-solve")
    parser.add_argument("--solve-budget", type=int, default=500_000, help="rl-zoo's n_timesteps")
    parser.add_argument("--rate-steps", type=int, default=50_000)
    parser.add_argument("--frames", type=int, default=100_000, help="torchrl frames per run")
    parser.add_argument(
        "--frames-per-batch", type=int, default=40, help="a batch per 5 steps of 8 envs"
    )
    parser.add_argument("--rounds", type=int, default=20, help="flower rounds per run")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run of everything")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: at least 3 (the rounds after the second are timed)")
    if args.quick:
        args.repeats, args.seeds, args.solve_budget = 1, args.seeds[:1], 5_000
        args.rate_steps, args.frames, args.rounds = 2_000, 2_000, 4
    only = set(args.only) | ({"sb3-solve", "sb3-rate"} if "sb3" in args.only else set())
    torch_note = {"torch_threads_source": "hybrid TrainConfig.torch_threads default"}

    if "sb3-solve" in only:
        solved = [sb3_solve(seed, args.solve_budget) for seed in args.seeds]
        settings = (
            A2C_SETTINGS
            | {
                "env": ENV_ID,
                "seeds": args.seeds,
                "budget": args.solve_budget,
                "eval_every": EVAL_EVERY,
                "eval_episodes": EVAL_EPISODES,
                "solved_return": SOLVED_RETURN,
                "evaluation": "deterministic, excluded from wall",
            }
            | torch_note
        )
        emit("sb3_a2c_env_steps_to_solve", [s for s, _ in solved], "env steps", settings)
        emit("sb3_a2c_train_wall_s_to_solve", [w for _, w in solved], "s", settings)
    if "sb3-rate" in only:
        rates = [sb3_rate(repeat, args.rate_steps) for repeat in range(args.repeats)]
        settings = A2C_SETTINGS | {"env": ENV_ID, "budget": args.rate_steps, "callbacks": None}
        emit("sb3_a2c_env_steps_per_s", rates, "env steps/s", settings | torch_note)
    if "torchrl" in only:
        runs = [
            fresh_process("torchrl", str(args.frames), str(args.frames_per_batch))
            for _ in range(args.repeats)
        ]
        settings = {
            "collector": "MultiAsyncCollector",
            "processes": 2,
            "envs_per_process": 8,
            "env": f"SerialEnv(8, GymEnv({ENV_ID}))",
            "policy": f"MLP 4-{HIDDEN}-{HIDDEN}-2 tanh, Categorical sampling",
            "frames": args.frames,
            "frames_per_batch": args.frames_per_batch,
            "rate": "frames after the first batch / time since it",
            "startup": "fresh process launch to the first batch",
        } | torch_note
        emit("torchrl_collector_frames_per_s", [r["frames_per_s"] for r in runs], "frames/s",
             settings)  # fmt: skip
        emit("torchrl_collector_startup_s", [r["startup_s"] for r in runs], "s", settings)
    if "flower" in only:
        clients, per_round = 100, 10
        runs = [
            fresh_process("flower", str(args.rounds), str(clients), str(per_round))
            for _ in range(args.repeats)
        ]
        settings = {
            "simulation": "flwr.simulation.run_simulation, Ray backend, default client resources",
            "clients": clients,
            "clients_per_round": per_round,
            "rounds": args.rounds,
            "local_work": "1 SGD step, 5 synthetic samples, MLP 4-64-64-2 (4,610 parameters)",
            "round_ms": "median of the rounds after the second",
            "startup": "fresh process launch to the end of round 1",
            "rss": "peak of the summed RSS of the process tree, sampled every 0.25 s",
        } | torch_note
        emit("flower_ms_per_round", [r["round_ms"] for r in runs], "ms", settings)
        emit("flower_startup_s", [r["startup_s"] for r in runs], "s", settings)
        emit("flower_rss_mb", [r["rss_mb"] for r in runs], "MB", settings)


if __name__ == "__main__":
    main()
