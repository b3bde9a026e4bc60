"""``PICOBOT_CONFIG``'s ``[models.NAME]`` tables become a catalog (providers/presets.py, pure)."""

from __future__ import annotations

import tomllib
from decimal import Decimal

import pytest

from providers.config import ProviderConfig
from providers.presets import DEFAULT_PRESET, load_catalog

BASE = ProviderConfig(provider="replay", connect_timeout=3.0, max_retries=5, max_tokens=4096)
GOOD = """
default_model = "smart"

[models.fast]
provider = "openai"
base_url = "https://api.example.com/v1"
model = "gpt-fast"
api_key_env = "FAST_KEY"
context_window = 128000
max_tokens = 2048
price_input = 0.15
price_output = 0.6
price_cached = 0.075
description = "quick and cheap"

[models.smart]
provider = "anthropic"
model = "claude-smart"
api_key_env = "SMART_KEY"
context_window = 200000
price_input = 3
price_output = 15
fallbacks = ["fast"]
reasoning = true
vision = false
thinking_budget = 2048
"""


def load(text: str, environ: dict[str, str] | None = None):
    return load_catalog(
        tomllib.loads(text),
        base=BASE,
        context_window=32000,
        environ=environ or {"FAST_KEY": "k1", "SMART_KEY": "k2"},
    )


def test_a_good_file_gives_every_preset_in_order_with_its_settings():
    catalog = load(GOOD)
    assert catalog.names() == ["fast", "smart"] and catalog.default == "smart" and catalog.from_file
    fast, smart = catalog.get("fast"), catalog.get("smart")
    assert (fast.config.provider, fast.config.base_url, fast.config.model) == (
        "openai",
        "https://api.example.com/v1",
        "gpt-fast",
    )
    assert fast.config.api_key == "k1" and fast.context_window == 128000 and fast.config.max_tokens == 2048
    assert (fast.price_input, fast.price_output, fast.price_cached) == (
        Decimal("0.15"),
        Decimal("0.6"),
        Decimal("0.075"),
    )
    assert all(isinstance(p, Decimal) for p in (smart.price_input, smart.price_output, smart.price_cached))
    assert smart.price_cached == Decimal(3)  # unset: the input price
    assert smart.fallbacks == ("fast",) and smart.reasoning and not smart.vision
    assert smart.config.thinking_budget == 2048 and smart.config.max_tokens == 4096  # from the base
    # What a table does not set comes from the PICOBOT_LLM_* settings, except the key.
    assert fast.config.connect_timeout == 3.0 and fast.config.max_retries == 5
    assert [p.name for p in catalog.chain("smart")] == ["smart", "fast"]
    assert catalog.get(None) is smart and catalog.get("") is smart
    assert catalog.resolve("removed-since") is smart


def test_public_shows_no_key():
    shown = load(GOOD, {"FAST_KEY": "sk-secret", "SMART_KEY": "sk-other"}).get("fast").public()
    assert "sk-secret" not in repr(shown) and "api_key" not in shown
    assert shown["available"] is True and shown["price_input"] == 0.15 and shown["fallbacks"] == []


def test_the_cost_follows_the_issues_formula():
    fast = load(GOOD).get("fast")
    # ((1000 − 400) × 0.15 + 400 × 0.075 + 500 × 0.6) / 1e6
    assert fast.cost(1000, 500, 400) == Decimal("0.00042")
    assert fast.cost(0, 0) == 0
    assert fast.cost(100, 0, 900) == Decimal("0.0000075")  # cached never exceeds input


def test_without_a_models_table_the_settings_are_the_preset_default():
    catalog = load("")
    assert catalog.names() == [DEFAULT_PRESET] and not catalog.from_file
    assert catalog.get(None).config is BASE and catalog.get(None).context_window == 32000
    assert load('default_model = "default"').default == DEFAULT_PRESET


def test_default_model_is_the_first_preset_when_not_named():
    assert load(GOOD.replace('default_model = "smart"', "")).default == "fast"


def test_a_key_variable_that_is_not_set_marks_the_preset_key_missing():
    catalog = load(GOOD, {"FAST_KEY": "k1"})
    assert catalog.get("smart").key_missing and catalog.get("smart").config.api_key == ""
    assert not catalog.get("fast").key_missing
    assert catalog.get("smart").public()["available"] is False


def test_an_unknown_name_lists_the_names_there_are():
    with pytest.raises(KeyError, match="no model preset 'nope' \\(there are: fast, smart\\)"):
        load(GOOD).get("nope")


ONE = '[models.a]\nprovider = "openai"\nmodel = "m"\n'


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('default_model = "x"', "default_model names 'x' but there is no [models] table"),
        ("models = 3", "[models] must hold at least one [models.NAME] table"),
        ("[models]", "[models] must hold at least one [models.NAME] table"),
        ('[models."bad name"]\nprovider = "openai"\nmodel = "m"', "a name is 1–64 letters"),
        ("[models]\na = 3", "[models.a] must be a table"),
        (ONE + "colour = 1", "[models.a]: unknown key 'colour'"),
        ('[models.a]\nprovider = "gemini"\nmodel = "m"', '[models.a].provider must be "openai", "anthropic"'),
        ('[models.a]\nprovider = "openai"', "[models.a].model is required for provider 'openai'"),
        (ONE + "model2 = 1", "unknown key 'model2'"),
        (ONE + 'api_key_env = "not a var"', "[models.a].api_key_env must name an environment variable"),
        (ONE + 'base_url = "ftp://x"', "[models.a].base_url must be an http(s) URL"),
        (ONE + "context_window = 0", "[models.a].context_window must be an integer ≥ 1"),
        (ONE + 'context_window = "big"', "[models.a].context_window must be an integer ≥ 1"),
        (ONE + "max_tokens = true", "[models.a].max_tokens must be an integer ≥ 1"),
        (ONE + "price_input = -1", "[models.a].price_input must be a finite number ≥ 0"),
        (ONE + 'price_output = "1"', "[models.a].price_output must be a number (per million tokens)"),
        (ONE + "price_cached = nan", "[models.a].price_cached must be a finite number ≥ 0"),
        (ONE + "vision = 1", "[models.a].vision must be true or false"),
        (ONE + 'fallbacks = "b"', "[models.a].fallbacks must be a list of preset names"),
        (ONE + 'fallbacks = ["b"]', "[models.a].fallbacks: no preset 'b'"),
        (ONE + 'fallbacks = ["a"]', "[models.a].fallbacks: a preset cannot fall back to itself"),
        (ONE + "model = 3", None),  # a duplicate key: TOML itself refuses it
        ('default_model = "b"\n' + ONE, "default_model = 'b' is not one of a"),
        ("default_model = 3\n" + ONE, "default_model = 3 is not one of a"),
    ],
)
def test_every_bad_file_is_refused_naming_the_table_and_key(text, said):
    if said is None:
        with pytest.raises(tomllib.TOMLDecodeError):
            tomllib.loads(text)
        return
    with pytest.raises(ValueError) as raised:
        load(text)
    assert str(raised.value).startswith("PICOBOT_CONFIG: ") and said in str(raised.value)


def test_a_key_holding_control_characters_is_refused():
    with pytest.raises(ValueError, match="FAST_KEY holds control characters"):
        load(GOOD, {"FAST_KEY": "k\n1", "SMART_KEY": "k2"})


def test_an_unknown_top_level_key_is_refused_as_a_likely_typo():
    with pytest.raises(
        ValueError, match=r"unknown key 'default_modle' \(known: default_model, mcp_servers, models\)"
    ):
        load('default_modle = "fast"\n' + GOOD.replace('default_model = "smart"', ""))


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            "max_tokens = 8192\ncontext_window = 8192\n",
            r"max_tokens \(8192\) must be below context_window \(8192\)",
        ),
        (
            "context_window = 1000\n",
            r"max_tokens \(4096, from PICOBOT_LLM_MAX_TOKENS\) must be below context_window",
        ),
    ],
)
def test_an_output_budget_that_fills_the_window_is_refused(table, said):
    text = '[models.tiny]\nprovider = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n' + table
    with pytest.raises(ValueError, match=r"\[models\.tiny\]\." + said):
        load(text)


def test_a_preset_at_the_public_endpoint_without_a_key_variable_cannot_be_chosen():
    preset = load('[models.bare]\nprovider = "openai"\nmodel = "gpt"\n').get("bare")
    assert preset.key_missing
    assert preset.key_problem == (
        "it calls the vendor's public endpoint without a key: set [models.bare].api_key_env"
    )
    local = load('[models.local]\nprovider = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n')
    assert not local.get("local").key_missing  # a local server may need no key


def test_the_public_view_never_shows_credentials_in_the_base_url():
    text = (
        '[models.p]\nprovider = "openai"\nmodel = "m"\n'
        'base_url = "https://user:sk-in-url-secret@llm.example.com/v1?api-key=sk-query-secret#x"\n'
    )
    shown = load(text).get("p").public()
    assert shown["base_url"] == "https://llm.example.com/v1"
    assert "secret" not in repr(shown)
