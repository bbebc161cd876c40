"""``plain_step``: the server's Adam, RMSProp and SGD step without Optimizer.step's wrappers must
give torch's own step bit for bit, and leave every other optimizer to torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from hybrid.core.global_model import make_optimizer, plain_step


def _run(name: str, fast: bool, **kw: float) -> tuple[torch.Tensor, dict]:
    gen = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(257, generator=gen), requires_grad=False)
    opt = make_optimizer(name, [param], 1e-2, 1e-5, 0.99, **kw)
    for step in range(25):
        grad = torch.randn(257, generator=gen) * (step + 1)
        opt.param_groups[0]["lr"] = 1e-2 / (1 + step)  # the loop's lr schedule writes it
        if fast:
            assert plain_step(opt, param, grad)
        else:
            param.grad = grad
            opt.step()
            param.grad = None
    return param.data.clone(), opt.state_dict()


@pytest.mark.parametrize("name", ["adam", "rmsprop", "sgd"])
def test_plain_step_is_torch_step_bit_for_bit(name):
    slow_param, slow_state = _run(name, fast=False)
    fast_param, fast_state = _run(name, fast=True)
    assert torch.equal(fast_param, slow_param)
    assert slow_state["state"].keys() == fast_state["state"].keys()  # SGD keeps none
    for index, slow in slow_state["state"].items():
        fast = fast_state["state"][index]
        assert slow.keys() == fast.keys()
        for key in slow:
            assert torch.equal(fast[key], slow[key]), key


def test_plain_step_leaves_other_optimizers_to_torch():
    param = torch.nn.Parameter(torch.zeros(3), requires_grad=False)
    for opt in (
        make_optimizer("sgd", [param], 0.1, 1e-5, 0.99, momentum=0.9),
        make_optimizer("fedadam", [param], 0.1, 1e-3, 0.99),
        torch.optim.Adam([param], lr=0.1, amsgrad=True),
        torch.optim.RMSprop([param], lr=0.1, momentum=0.9),
    ):
        assert not plain_step(opt, param, torch.ones(3))
        assert torch.equal(param.data, torch.zeros(3))


def test_plain_step_steps_every_parameter_along_its_grad():
    """Without (param, grad): a client's local optimizer over the model's parameters."""
    model = torch.nn.Linear(3, 2)
    twin = torch.nn.Linear(3, 2)
    twin.load_state_dict(model.state_dict())
    fast = make_optimizer("adam", list(model.parameters()), 1e-2, 1e-5, 0.99)
    slow = make_optimizer("adam", list(twin.parameters()), 1e-2, 1e-5, 0.99)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        for net in (model, twin):
            net.zero_grad()
            net(x).square().sum().backward()
        assert plain_step(fast)
        slow.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)
    model.bias.grad = None  # a parameter without a gradient: torch's step skips it
    assert not plain_step(fast)


def test_building_and_stepping_optimizers_does_not_import_dynamo():
    code = (
        "import sys, torch\n"
        "from hybrid.core.global_model import make_optimizer, plain_step\n"
        "p = torch.nn.Parameter(torch.zeros(3), requires_grad=False)\n"
        "for name in ('adam', 'rmsprop', 'sgd'):\n"
        "    assert plain_step(make_optimizer(name, [p], 0.1, 1e-5, 0.99), p, torch.ones(3))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_one_flat_step_is_the_per_parameter_step(name):
    """What a client's local step relies on: Adam and SGD act coordinate by coordinate, so a
    step over one flat vector gives the per-parameter steps' bits."""
    gen = torch.Generator().manual_seed(2)
    sizes = [256, 64, 4096, 64, 128, 2, 7]
    flat = torch.randn(sum(sizes), generator=gen)
    views = list(flat.clone().split(sizes))
    flat_opt = make_optimizer(name, [flat], 3e-3, 1e-5, 0.99)
    split_opt = make_optimizer(name, views, 3e-3, 1e-5, 0.99)
    for _ in range(5):
        grad = torch.randn(sum(sizes), generator=gen)
        for view, chunk in zip(views, grad.split(sizes), strict=True):
            view.grad = chunk.clone()
        assert plain_step(flat_opt, flat, grad)
        assert plain_step(split_opt)
    assert torch.equal(flat, torch.cat(views))
