"""Defaults per env family, checked on tasks beyond CartPole: the final return at a fixed
budget next to a random policy's, the solved rate over seeds, env steps/s; sync vs async.

    python benchmarks/envs.py [--envs Acrobot-v1 LunarLander-v3 ...] [--seeds 0]
                              [--schedulers sync async] [--scale 1.0]

Each run uses the defaults ``hybrid train --env ENV`` would (hybrid/defaults.py: the id's
own entry, else its family's, else its spaces'; the table says which) with the budget
below (times ``--scale``) and no evaluation stop; the return is the final evaluation
(deterministic policy, the env's true score; per agent on MPE tasks). "random" is the
uniformly random policy's mean return over the same number of episodes; "solved" counts
the seeds whose final evaluation reaches the env's reward threshold (Gymnasium's), where
it has one. Atari ids are only classified (the family and the values it sets, no
training: a game needs millions of frames). On the serial runtime every worker shares
one process and one torch thread, so env steps/s is also the throughput per core. Envs
whose extra is not installed are skipped with the reason. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import gymnasium as gym

# Run from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hybrid
from hybrid import ConfigError, TrainConfig
from hybrid.defaults import apply_env_defaults, defaults_for

BUDGETS = {
    # env: (env steps, evaluation episodes); sized for minutes on 2 shared cores, so the
    # returns say whether a family's defaults learn, not how far they get.
    "Acrobot-v1": (100_000, 10),  # classic control, discrete: the tuned A2C
    "MountainCarContinuous-v0": (100_000, 5),  # classic control, continuous: PPO
    "LunarLander-v3": (150_000, 5),  # Box2D, discrete: rl-zoo's PPO
    "InvertedPendulum-v5": (50_000, 5),  # MuJoCo: the PPO recipe
    "mpe2/simple_reference_v3": (200_000, 20),  # MPE, not the two the docs benchmark
    "Pendulum-v1": (150_000, 10),  # named in the table (its own entry)
    "HalfCheetah-v5": (100_000, 3),  # MuJoCo locomotion (slow: ~1.2k env steps/s)
    "ALE/Breakout-v5": (0, 0),  # Atari: classified only
}


def random_return(env_id: str, episodes: int, seed: int) -> float:
    """Mean return of uniformly random actions over ``episodes`` episodes (a Gymnasium id)."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    total = 0.0
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
    env.close()
    return total / episodes


def threshold(env_id: str) -> float | None:
    spec = gym.registry.get(env_id)
    return None if spec is None else spec.reward_threshold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(BUDGETS))
    parser.add_argument("--schedulers", nargs="+", default=["sync", "async"])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every budget")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()

    rows, classified = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.envs:
            steps, episodes = BUDGETS.get(env, (50_000, 5))
            if steps == 0:
                try:
                    source, recipe = defaults_for(env)
                except ConfigError as exc:
                    print(f"skipped {env}: {exc}", flush=True)
                    continue
                cfg = apply_env_defaults(TrainConfig(env=env))
                values = ", ".join(f"{k}={getattr(cfg, k)}" for k in recipe)
                classified.append((env, source, values))
                continue
            budget = max(1, int(steps * args.scale))
            for scheduler in args.schedulers:
                finals, randoms, rates = [], [], []
                try:
                    for seed in args.seeds:
                        cfg = TrainConfig(
                            env=env,
                            scheduler=scheduler,
                            seed=seed,
                            total_env_steps=budget,
                            stop_when_solved=False,
                            eval_every=10**9,  # only the final evaluation
                            eval_episodes=episodes,
                            progress=False,
                            out=str(Path(tmp, f"{env.replace('/', '_')}-{scheduler}-{seed}")),
                        )
                        result = hybrid.train(cfg)
                        s, c = result.summary, result.config
                        finals.append(float(s["final_eval_return"]))
                        rates.append(float(s["env_steps_per_s"]))
                        randoms.append(
                            float(s["random_return_mean"])
                            if "random_return_mean" in s  # multi-agent: per agent, same seeds
                            else random_return(env, episodes, seed)
                        )
                except ConfigError as exc:  # an extra that is not installed
                    print(f"skipped {env}: {exc}", flush=True)
                    break
                goal = threshold(env)
                solved = (
                    f"{sum(f >= goal for f in finals)}/{len(finals)} (>= {goal:g})"
                    if goal is not None
                    else "-"
                )
                rows.append(
                    (
                        env,
                        defaults_for(env)[0],
                        scheduler,
                        c.algo,
                        f"{c.workers}x{c.envs_per_worker}x{c.rollout_steps}",
                        s["env_steps"],
                        statistics.median(rates),
                        statistics.median(finals),
                        statistics.median(randoms),
                        solved,
                        ", ".join(f"{f:.1f}" for f in finals),
                    )
                )
                print(f"{env} {scheduler}: {rows[-1][5:]}", flush=True)

    print(f"\nSeeds {args.seeds}, budgets x{args.scale:g}; medians over seeds\n")
    print(
        "| env | defaults from | scheduler | algo | workers x envs x steps | env steps "
        "| env steps/s (per core) | final eval return | random policy | solved | per seed |"
    )
    print("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |")
    for env, source, scheduler, algo, shape, steps, sps, ret, rnd, solved, per in rows:
        print(
            f"| {env} | {source} | {scheduler} | {algo} | {shape} | {steps:,} | {sps:,.0f} "
            f"| {ret:.1f} | {rnd:.1f} | {solved} | {per} |"
        )
    if classified:
        print("\n| env | defaults from | values set (classified only, not trained) |")
        print("| --- | --- | --- |")
        for env, source, values in classified:
            print(f"| {env} | {source} | {values} |")


if __name__ == "__main__":
    main()
