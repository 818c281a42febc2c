"""Config file, environment overrides, precedence and errors that name the key."""

from pathlib import Path

import pytest

from extender.core.config import ConfigError, build_config, page_size_of
from extender.core.policy import Mode, Policy, Widening
from extender.shell.configfile import load_config


def test_empty_config_is_the_built_in_defaults() -> None:
    config = build_config(None, {})
    assert config.resource_names[0] == "hugepages-2Mi"
    assert page_size_of(config.resource_names[0]) == 2 * 1024 * 1024
    assert config.policy_for("anything") == Policy()


def test_one_gi_pages() -> None:
    assert page_size_of(build_config({"resourceName": "hugepages-1Gi"}, {}).resource_names[0]) == 1 << 30


def test_namespace_entries_inherit_the_defaults_and_override_only_their_keys() -> None:
    config = build_config(
        {
            "defaults": {"mode": "shadow", "sampleSize": 5, "widening": "resample"},
            "namespaces": {"payments": {"mode": "enforce"}, "vms": {"needFromMemory": True, "alpha": 0}},
        },
        {},
    )
    assert config.policy_for("payments") == Policy(mode=Mode.ENFORCE, sample_size=5, widening=Widening.RESAMPLE)
    assert config.policy_for("vms").need_from_memory
    assert config.policy_for("vms").alpha == 0
    assert config.policy_for("vms").mode is Mode.SHADOW
    assert config.policy_for("other") == Policy(mode=Mode.SHADOW, sample_size=5, widening=Widening.RESAMPLE)


def test_precedence_builtin_then_file_then_environment_then_namespace() -> None:
    document = {"defaults": {"mode": "off", "sampleSize": 2, "alpha": 0.1}, "namespaces": {"a": {"sampleSize": 9}}}
    env = {
        "BEST_OF_K_HUGEPAGE_FIT_FILTER": "true",
        "BEST_OF_K_K": "4",
        "BEST_OF_K_R": "2.5",
        "BEST_OF_K_ALPHA": "0.25",
        "BEST_OF_K_HUGEPAGE_MEMORY": "false",
    }
    config = build_config(document, env)
    defaults = config.policy_for("b")
    assert defaults.mode is Mode.ENFORCE  # env over file
    assert defaults.sample_size == 4
    assert (defaults.overcommit_ratio, defaults.alpha, defaults.score_hugepages) == (2.5, 0.25, False)
    assert config.policy_for("a").sample_size == 9  # the namespace's own entry wins
    assert config.policy_for("a").mode is Mode.ENFORCE  # and inherits the rest


def test_fit_filter_false_is_the_rfc_shadow_phase() -> None:
    config = build_config({"defaults": {"mode": "off"}}, {"BEST_OF_K_HUGEPAGE_FIT_FILTER": "false"})
    assert config.policy_for("x").mode is Mode.SHADOW


def test_exempt_namespace_always_passes_through() -> None:
    config = build_config({"namespaces": {"hx": {"mode": "enforce"}}}, {}, frozenset({"hx"}))
    assert config.policy_for("hx").mode is Mode.OFF


@pytest.mark.parametrize(
    ("document", "env", "message"),
    [
        ({"defaults": {"mode": "strict"}}, {}, "defaults.mode: Invalid enum value 'strict'"),
        ({"defaults": {"sampelSize": 3}}, {}, "unknown field `sampelSize`"),
        ({"defaults": {"sampleSize": -1}}, {}, "defaults.sampleSize: Expected `int` >= 0"),
        ({"defaults": {"overcommitRatio": 0}}, {}, "defaults.overcommitRatio: Expected `float` > 0"),
        ({"namespaces": {"payments": {"widening": "sideways"}}}, {}, "namespaces.payments.widening"),
        ({"namespaces": {"payments": {"bogus": 1}}}, {}, "namespaces.payments: Object contains unknown field `bogus`"),
        ({"resourceName": "memory"}, {}, "resourceName: expected a hugepage resource"),
        ({"resourceName": "hugepages-3Xi"}, {}, "resourceName"),
        ({"maxRequestBytes": "big"}, {}, "maxRequestBytes: Expected `int`, got `str`"),
        ({"extra": 1}, {}, "unknown field `extra`"),
        ({}, {"BEST_OF_K_HUGEPAGE_FIT_FILTER": "maybe"}, "BEST_OF_K_HUGEPAGE_FIT_FILTER: expected true or false"),
        ({}, {"BEST_OF_K_K": "three"}, "BEST_OF_K_K: expected a number"),
        ({}, {"BEST_OF_K_R": "0"}, "BEST_OF_K_R: must be > 0"),
        ({}, {"BEST_OF_K_ALPHA": "-1"}, "BEST_OF_K_ALPHA: must be >= 0"),
    ],
)
def test_invalid_config_names_the_key(document: object, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        build_config(document, env)
    assert message in str(raised.value)


def test_load_config_reads_yaml_and_reports_files_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("defaults:\n  mode: enforce\nnamespaces:\n  dev: {mode: off}\n")
    config = load_config(path, environ={})
    assert config.policy_for("prod").mode is Mode.ENFORCE
    assert config.policy_for("dev").mode is Mode.OFF
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml", environ={})
    (tmp_path / "bad.yaml").write_text("defaults: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml", environ={})


def test_a_renamed_key_is_named_with_its_new_name() -> None:
    with pytest.raises(ConfigError, match="reservationTimeoutSeconds`: it is now holdTimeoutSeconds"):
        build_config({"namespaces": {"vms": {"reservationTimeoutSeconds": 5}}}, {})
