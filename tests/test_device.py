"""``--device``: the global model, server optimizer and learner on a device; workers on CPU.

This machine has no GPU: the tests pin that ``cpu`` (and ``auto``, which is cpu here) leave
every result bit for bit as it was before devices existed, through the same code that moves
models and batches to a device, and that ``cuda`` is refused in one line.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import hybrid
from hybrid.assembly import algo_settings, runtime_settings, scheduler_settings
from hybrid.config import ConfigError, TrainConfig
from hybrid.core.global_model import GlobalModel, resolve_device
from hybrid.core.learner import to_device
from hybrid.protocol import Step

NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="on a machine with CUDA, auto picks cuda (other hashes)"
)

# final_params_sha256 of these runs on main before --device existed (commit b678f3a).
# async_a2c's first round computes the workers' gradients together (run_group); when that
# batched computation changed (vmap -> stacked parameter copies) its rounding changed, and
# the hash was taken again with --device unset.
#
# The bits depend on the CPU's float kernels as well as on the code: the same commit, torch
# 2.13.0+cpu and packages gives the first hash of each case on the machine the pins were
# taken on and the second on an AVX-512 Xeon (the CI machine since December 2026; main at
# 9de93c5, before any change here, gives it). Either is the pre-device result on its CPU;
# anything else is a change in what the device path computes.
BEFORE_DEVICES = {
    "async_a2c": (
        (
            "c328319f7908a6cbf4367ab43faed50707fb16700df093970765ea17297a3358",
            "caf0323b03ae6190961adcf4758d6de16847a1d8738419b654b8c0a7cc07a809",
        ),
        {},
    ),
    "hybrid_vtrace": (
        (
            "026b5dfbd66a683399e13c5eefde4ba24c613eed77ab625386f4ca3070205a9a",
            "b2c2ba837489437e46d872de707956e914c80c5df5dd057de6a8397cfa507063",
        ),
        {"scheduler": "hybrid", "algo": "a2c", "learner_batch": 2},
    ),
    "hybrid_apex": (
        (
            "14abff3c2b53d211b86a81abb4ab5a315efcd22944f85d6383d3308c12c58934",
            "761d0c9c602c27a57a848aa122bfdc5fb8e4180f89e898ccb2299c428e07511c",
        ),
        {
            "scheduler": "hybrid",
            "algo": "nstep_q",
            "learner_batch": 2,
            "learning_starts": 50,
            "replay_batch": 16,
        },
    ),
    "hybrid_ppo": (
        (
            "8f0649d86889db93363347582eb7bbf146bf5eae087d921b8c7ee80ab67617a4",
            "186442b1006355d95be67dd598a744c310f570d5c665124595446d26a5991356",
        ),
        {"scheduler": "hybrid", "algo": "ppo", "learner_batch": 2},
    ),
}


@pytest.fixture
def device_config(tiny_config, tmp_path):
    """conftest's tiny CartPole run, async by default, spending its whole budget."""

    def make(name: str, **changes) -> TrainConfig:
        changes = {"scheduler": "async", "stop_when_solved": False, **changes}
        return tiny_config(out=str(tmp_path / name), **changes)

    return make


@pytest.mark.parametrize("case", sorted(BEFORE_DEVICES))
def test_device_cpu_computes_what_it_did_before_devices(device_config, case):
    """V-trace, Ape-X and PPO learners (and a plain async run) through the device path."""
    expected, changes = BEFORE_DEVICES[case]
    result = hybrid.train(device_config(case, device="cpu", **changes))
    assert result.summary["final_params_sha256"] in expected


@NO_CUDA
@pytest.mark.parametrize("case", ["async_a2c", "hybrid_vtrace"])
def test_device_auto_is_cpu_without_a_gpu(device_config, case):
    assert resolve_device("auto") == torch.device("cpu")
    expected, changes = BEFORE_DEVICES[case]
    result = hybrid.train(device_config(case, **changes))  # auto, the default
    assert result.summary["final_params_sha256"] in expected


@NO_CUDA
def test_cuda_without_cuda_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^device: cuda, but torch finds no CUDA GPU here"):
        TrainConfig(device="cuda").validate()
    cli = [sys.executable, "-m", "hybrid.cli", "train", "--device", "cuda"]
    proc = subprocess.run(
        [*cli, "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "device: cuda" in proc.stderr and "--device cpu or auto" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_device_names_are_checked():
    with pytest.raises(ConfigError, match=r"^device: unknown 'gpu'; choose one of auto, cpu, cuda"):
        TrainConfig(device="gpu").validate()


def test_global_model_hands_out_cpu_copies_and_takes_cpu_directions():
    model = GlobalModel(torch.zeros(4), optimizer="sgd", lr=1.0, device="cpu")
    assert model.device == torch.device("cpu") and model.view() is model
    snapshot = model.snapshot()
    assert snapshot.params.device.type == "cpu"
    assert snapshot.params.data_ptr() != model.params.data_ptr(), "a copy, not θ itself"
    model.apply(Step(torch.ones(4)))
    assert torch.equal(model.params, -torch.ones(4)) and torch.equal(
        snapshot.params, torch.zeros(4)
    )
    assert model.state_dict()["params"].data_ptr() != model.params.data_ptr()


def test_to_device_moves_every_tensor_of_a_batch():
    from hybrid.algorithms.rollout import Rollout

    rollout = Rollout(
        obs=torch.zeros(2, 1, 3),
        actions=torch.zeros(2, 1),
        rewards=torch.zeros(2, 1),
        terminated=torch.zeros(2, 1, dtype=torch.bool),
        truncated=torch.zeros(2, 1, dtype=torch.bool),
        last_obs=torch.zeros(1, 3),
        final_obs={(1, 0): torch.ones(3)},
        episode_returns=[1.0],
    )
    moved = to_device(rollout, torch.device("cpu"))
    assert isinstance(moved, Rollout) and moved.episode_returns == [1.0]
    assert torch.equal(moved.final_obs[(1, 0)], torch.ones(3))
    assert moved.obs is rollout.obs, "on CPU nothing is copied"


def test_a_learner_moved_to_a_device_still_loads_and_reads_one_flat_buffer():
    from hybrid.algorithms import ALGORITHMS
    from hybrid.envs import describe

    cfg = TrainConfig(env="CartPole-v1", scheduler="hybrid", algo="a2c")
    learner = (
        ALGORITHMS["a2c"]
        .learner(algo_settings(cfg), describe("CartPole-v1"))
        .to(torch.device("cpu"))
    )
    values = torch.arange(learner.flat.numel, dtype=torch.float32)
    learner.flat.load(values)
    seen = torch.cat([p.detach().reshape(-1) for p in learner.model.parameters()])
    assert torch.equal(seen, values), "the model's parameters are views of the new flat buffer"


def test_auto_keeps_theta_on_cpu_where_workers_write_it(monkeypatch):
    """With a GPU, auto is cuda, except under Hogwild! (workers step θ in shared CPU
    memory) and for multi-agent learners, where cuda itself is refused in one line."""
    from hybrid.envs import describe
    from hybrid.schedulers import make_scheduler
    from hybrid.trainer import learner_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    info = describe("CartPole-v1")

    def device(**changes) -> str:
        cfg = TrainConfig(env="CartPole-v1", workers=2, **changes)
        return learner_device(cfg, info, make_scheduler(scheduler_settings(cfg)).applies_alone).type

    assert device(scheduler="hybrid") == "cuda"
    assert device(scheduler="async", runtime="serial") == "cuda"
    assert device(scheduler="async", runtime="processes") == "cpu"  # Hogwild!
    assert device(scheduler="async", runtime="processes", lock_free=False) == "cuda"
    assert device(scheduler="sync", runtime="processes") == "cuda"  # the main process applies
    with pytest.raises(ConfigError, match=r"^device: cuda: Hogwild! workers step θ in shared"):
        device(scheduler="async", runtime="processes", device="cuda")
    assert device(scheduler="hybrid", device="cpu") == "cpu"


def test_edge_clients_under_async_on_processes_keep_the_learner_on_the_gpu(monkeypatch):
    """Edge clients come and go on any process, so their workers never write θ (no
    Hogwild!): the learner may use the GPU, and --device cuda is not refused."""
    from hybrid.envs import describe
    from hybrid.runtimes import workers_write_params
    from hybrid.schedulers import make_scheduler
    from hybrid.trainer import learner_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    info = describe("CartPole-v1")
    cfg = TrainConfig(env="CartPole-v1", workers=2, clients=8, scheduler="async")
    applies_alone = make_scheduler(scheduler_settings(cfg)).applies_alone
    assert applies_alone
    assert not workers_write_params(runtime_settings(cfg.replace(runtime="processes")), True, False)
    for device in ("auto", "cuda"):
        chosen = learner_device(cfg.replace(runtime="processes", device=device), info, True)
        assert chosen.type == "cuda", device
    # the same run with persistent workers is Hogwild!: θ stays in shared CPU memory
    persistent = cfg.replace(runtime="processes", clients=None)
    assert learner_device(persistent, info, True).type == "cpu"
    with pytest.raises(ConfigError, match=r"^device: cuda: Hogwild!"):
        learner_device(persistent.replace(device="cuda"), info, True)
