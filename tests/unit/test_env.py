"""Environment capture: the device switches and plugins that change where work runs."""

from __future__ import annotations

import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from bakeoff.env import capture_environment
from bakeoff.verdicts.regressions import environment_diff


def test_test_device_switches_change_the_environment(monkeypatch):
    monkeypatch.setenv("BAKEOFF_EMU", "1")
    monkeypatch.setenv("BAKEOFF_EMU_UNSUPPORTED", "aten::rsqrt,aten::mul")
    before = capture_environment()
    monkeypatch.setenv("BAKEOFF_EMU_UNSUPPORTED", "aten::rsqrt")
    after = capture_environment()
    assert before.data["env"]["BAKEOFF_EMU"] == "1"
    assert before.fingerprint != after.fingerprint
    diff = environment_diff(before, after)
    assert [(c.key, c.before, c.after) for c in diff.changes] == [
        ("env.BAKEOFF_EMU_UNSUPPORTED", "aten::rsqrt,aten::mul", "aten::rsqrt")
    ]
    # control: bakeoff's own locations are not behaviour and stay out of the capture
    monkeypatch.setenv("BAKEOFF_DB", "/tmp/elsewhere.db")
    assert "BAKEOFF_DB" not in capture_environment().data["env"]
    assert capture_environment().fingerprint == after.fingerprint


def test_plugins_are_recorded_with_their_versions(monkeypatch):
    monkeypatch.delenv("BAKEOFF_PLUGINS", raising=False)
    plain = capture_environment()
    assert "plugins" not in plain.data  # without plugins the fingerprint stays what it was
    monkeypatch.setenv("BAKEOFF_PLUGINS", "rich, bakeoff_no_such_plugin")
    with_plugins = capture_environment()
    assert with_plugins.data["plugins"] == {"rich": metadata.version("rich"), "bakeoff_no_such_plugin": "unknown"}
    assert with_plugins.data["env"]["BAKEOFF_PLUGINS"] == "rich, bakeoff_no_such_plugin"
    assert with_plugins.fingerprint != plain.fingerprint


def _install(root: Path, name: str, version: str, entry_points: str) -> Path:
    """A distribution installed as pip leaves one: its ``.dist-info`` on ``sys.path``."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return root


@pytest.mark.parametrize("group", ["bakeoff.checks", "bakeoff.scenarios", "bakeoff.engines"])
def test_a_plugin_distribution_enters_the_packages_and_the_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: str
) -> None:
    """Installing or upgrading a plugin changes the environment, so a regression can be put on it."""
    monkeypatch.delenv("BAKEOFF_PLUGINS", raising=False)
    # control: a distribution with entry points elsewhere is not a plugin and changes nothing
    monkeypatch.syspath_prepend(str(_install(tmp_path / "other", "tiny-tool", "3.0", "[console_scripts]\nt = t:m\n")))
    plain = capture_environment()
    assert "tiny-tool" not in plain.data["packages"]
    entry = f"[{group}]\ntiny = tiny_bakeoff_plugin:Tiny\n"
    monkeypatch.syspath_prepend(str(_install(tmp_path / "v1", "tiny-bakeoff-plugin", "1.0", entry)))
    installed = capture_environment()
    assert installed.data["packages"]["tiny-bakeoff-plugin"] == "1.0"
    assert {k: v for k, v in installed.data["packages"].items() if k != "tiny-bakeoff-plugin"} == plain.data["packages"]
    assert installed.fingerprint != plain.fingerprint
    monkeypatch.syspath_prepend(str(_install(tmp_path / "v2", "tiny-bakeoff-plugin", "1.1", entry)))
    upgraded = capture_environment()
    assert upgraded.fingerprint not in (plain.fingerprint, installed.fingerprint)
    assert [(c.key, c.before, c.after) for c in environment_diff(installed, upgraded).changes] == [
        ("packages.tiny-bakeoff-plugin", "1.0", "1.1")
    ]


def test_the_test_devices_build_directory_is_one_per_checkout(tmp_path, monkeypatch):
    # torch rebuilds an extension whose source path or include paths differ from its last build's:
    # two checkouts sharing one build directory rebuilt it in turns
    import shutil

    from bakeoff.emu import extension

    monkeypatch.setenv("BAKEOFF_CACHE", str(tmp_path / "cache"))
    here = extension.cache_dir()
    assert here == extension.cache_dir()  # the same checkout finds its build again
    other = tmp_path / "checkout" / "emu_device.cpp"
    other.parent.mkdir()
    shutil.copy(extension.SOURCE, other)
    monkeypatch.setattr(extension, "SOURCE", other)
    assert extension.cache_dir() != here  # the same source elsewhere builds apart
