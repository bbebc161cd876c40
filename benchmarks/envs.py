"""Environments beyond CartPole: env steps/s and return at a fixed budget, sync vs async.

    python benchmarks/envs.py [--envs Pendulum-v1 LunarLander-v3 HalfCheetah-v5 ALE/Pong-v5]
                              [--schedulers sync async] [--scale 1.0] [--seed 0]

Each run uses the env's defaults (hybrid/defaults.py) with the budget below
(times ``--scale``) and no evaluation stop; the return is the final evaluation
(deterministic policy, the env's true score). On the serial runtime every
worker shares one process and one torch thread, so env steps/s is also the
throughput per core. Envs whose extra is not installed are skipped with the
reason. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import hybrid
from hybrid import ConfigError, TrainConfig

BUDGETS = {
    # env: (env steps, evaluation episodes); small enough for ~10 minutes on 2 cores
    "Pendulum-v1": (150_000, 10),
    "LunarLander-v3": (150_000, 5),
    "HalfCheetah-v5": (100_000, 3),
    "ALE/Pong-v5": (6_000, 1),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(BUDGETS))
    parser.add_argument("--schedulers", nargs="+", default=["sync", "async"])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every budget")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.envs:
            steps, episodes = BUDGETS.get(env, (50_000, 5))
            budget = max(1, int(steps * args.scale))
            for scheduler in args.schedulers:
                cfg = TrainConfig(
                    env=env,
                    scheduler=scheduler,
                    seed=args.seed,
                    total_env_steps=budget,
                    stop_when_solved=False,
                    eval_every=10**9,  # only the final evaluation
                    eval_episodes=episodes,
                    progress=False,
                    out=str(Path(tmp, f"{env.replace('/', '_')}-{scheduler}")),
                )
                try:
                    result = hybrid.train(cfg)
                except ConfigError as exc:  # an extra that is not installed
                    print(f"skipped {env}: {exc}")
                    break
                s, c = result.summary, result.config
                rows.append(
                    (
                        env,
                        scheduler,
                        c.algo,
                        f"{c.workers}x{c.envs_per_worker}",
                        s["env_steps"],
                        s["env_steps_per_s"],
                        s["final_eval_return"],
                        s["staleness_mean"],
                    )
                )
                print(f"{env} {scheduler}: {rows[-1][4:]}", flush=True)

    print()
    print(
        "| env | scheduler | algo | workers x envs | env steps | env steps/s (per core) "
        "| final eval return | staleness mean |"
    )
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    for env, scheduler, algo, shape, steps, sps, ret, tau in rows:
        print(
            f"| {env} | {scheduler} | {algo} | {shape} | {steps:,} | {sps:,.0f} "
            f"| {ret:.1f} | {tau:.2f} |"
        )


if __name__ == "__main__":
    main()
