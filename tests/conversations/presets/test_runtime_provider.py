"""The process's presets and their providers (conversations/runtime/provider.py; issue 17)."""

from __future__ import annotations

import pytest

from conversations.runtime.provider import get_provider, set_provider, turn_provider
from providers.fallback import FallbackProvider, falls_back
from providers.metering import MeteredProvider
from providers.testing import ScriptedProvider
from tests.conversations.presets.conftest import preset_table

URL = "http://127.0.0.1:9/v1"


@pytest.fixture
def three_presets(presets, monkeypatch):
    monkeypatch.delenv("PRESET_KEY_C", raising=False)
    presets(
        preset_table("A", URL, fallbacks=["C", "B"])
        + preset_table("B", URL)
        + preset_table("C", URL, api_key_env="PRESET_KEY_C")
    )
    yield
    set_provider(None)


def test_each_preset_gets_its_own_metered_provider_and_a_separate_one_before_a_fallback(three_presets):
    a, b = get_provider("A"), get_provider("B")
    assert isinstance(a, MeteredProvider) and (a.preset, b.preset) == ("A", "B")
    assert (a.model, b.model) == ("model-A", "model-B") and get_provider("A") is a
    before = get_provider("A", before_fallback=True)
    assert before is not a and before.inner is not a.inner
    assert before.inner.retry_elsewhere is falls_back and a.inner.retry_elsewhere is None
    assert get_provider(None) is a and get_provider("removed") is a  # the default


def test_a_preset_without_its_key_cannot_be_built(three_presets):
    with pytest.raises(ValueError, match=r"model preset 'C': \$PRESET_KEY_C is not set"):
        get_provider("C")


def test_set_provider_can_give_one_preset_its_own_provider(three_presets):
    everyone, only_b = ScriptedProvider([], model="all"), ScriptedProvider([], model="b-only")
    set_provider(everyone)
    set_provider(only_b, preset="B")
    assert get_provider("A").inner is everyone and get_provider("B").inner is only_b
    set_provider(None, preset="B")
    assert get_provider("B").inner is everyone
    set_provider(only_b, preset="B")
    set_provider(None)
    assert get_provider("B").inner is not only_b and get_provider("B").model == "model-B"


def test_a_turns_provider_is_the_chain_without_fallbacks_whose_key_is_missing(three_presets):
    chain = turn_provider("A")
    assert isinstance(chain, FallbackProvider)
    assert [name for name, _ in chain.steps] == ["A", "B"]
    assert [step.inner.retry_elsewhere for _, step in chain.steps] == [falls_back, None]
    assert turn_provider("B") is get_provider("B")  # no fallbacks: the preset's own provider
