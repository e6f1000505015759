"""Environment capture: the device switches and plugins that change where work runs."""

from __future__ import annotations

from importlib import metadata

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
