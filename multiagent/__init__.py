"""Cooperative PettingZoo tasks as one more worker workload.

[`multiagent.pettingzoo`][multiagent.pettingzoo] adapts a parallel (or AEC) env to the workers'
vector-env interface; [`multiagent.mappo`][multiagent.mappo] holds the MAPPO / IPPO actor-critic and
its losses; [`multiagent.env_state`][multiagent.env_state] captures and restores env state so
``--resume`` stays bit-exact. Nothing is imported here: the loop imports what a multi-agent run
needs.
"""

__all__ = ["env_state", "mappo", "pettingzoo"]
