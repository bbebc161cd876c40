"""``plain_step``: the server's Adam and RMSProp step without Optimizer.step's wrappers must
give torch's own step bit for bit, and leave every other optimizer to torch."""

from __future__ import annotations

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


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
def test_plain_step_is_torch_step_bit_for_bit(name):
    slow_param, slow_state = _run(name, fast=False)
    fast_param, fast_state = _run(name, fast=True)
    assert torch.equal(fast_param, slow_param)
    slow, fast = slow_state["state"][0], fast_state["state"][0]
    assert slow.keys() == fast.keys()
    for key in slow:
        assert torch.equal(fast[key], slow[key]), key


def test_plain_step_leaves_other_optimizers_to_torch():
    param = torch.nn.Parameter(torch.zeros(3), requires_grad=False)
    for opt in (
        make_optimizer("sgd", [param], 0.1, 1e-5, 0.99),
        make_optimizer("fedadam", [param], 0.1, 1e-3, 0.99),
        torch.optim.Adam([param], lr=0.1, amsgrad=True),
        torch.optim.RMSprop([param], lr=0.1, momentum=0.9),
    ):
        assert not plain_step(opt, param, torch.ones(3))
        assert torch.equal(param.data, torch.zeros(3))
