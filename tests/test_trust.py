"""What a resume, a sweep and a scheduler file may be trusted with: hostile checkpoint
contents are refused in one line, scheduler files run only when the user names them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybrid.checkpoint import BIT_GENERATORS, CheckpointError, from_plain, to_plain


@pytest.mark.parametrize("name", sorted(BIT_GENERATORS))
def test_numpys_own_bit_generators_round_trip(name):
    generator = np.random.Generator(BIT_GENERATORS[name](7))
    generator.random(3)
    restored = from_plain(to_plain(generator))
    assert restored.random(4).tolist() == generator.random(4).tolist()


@pytest.mark.parametrize(
    "name",
    ["seterr", "get_state", "default_rng", "NoSuchGenerator", 5, None, "BitGenerator"],
)
def test_a_generator_state_naming_anything_else_is_refused_without_calling_it(name, monkeypatch):
    called = []
    monkeypatch.setattr(np.random, "seterr", lambda: called.append(1), raising=False)
    state = to_plain(np.random.default_rng(0))
    state["__generator__"]["bit_generator"] = name
    with pytest.raises(CheckpointError, match="bit generator") as caught:
        from_plain(state)
    assert "\n" not in str(caught.value)
    assert not called


def test_a_malformed_generator_state_is_one_line():
    state = to_plain(np.random.default_rng(0))
    state["__generator__"]["state"] = "garbage"
    with pytest.raises(CheckpointError, match="malformed"):
        from_plain(state)


@pytest.mark.parametrize("dtype", ["no-such-dtype", "|O", 17, "<U3"])
def test_an_array_with_a_bad_dtype_is_one_line(dtype):
    with pytest.raises(CheckpointError, match="dtype"):
        from_plain({"__ndarray__": torch.zeros(3), "dtype": dtype})
