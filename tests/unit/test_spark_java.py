"""Without Java, Spark commands say how to install it instead of a launcher's stack trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from rt_appliance.errors import UsageError
from rt_appliance.spark.java import find_java

pytestmark = pytest.mark.unit


def test_missing_java_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="apt-get install openjdk-17-jre-headless"):
        find_java()
    with pytest.raises(UsageError, match=f"{tmp_path}/jdk/bin/java is not there"):
        find_java(str(tmp_path / "jdk"))


def test_java_home_is_used_and_exported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", "")  # recorded, so the value find_java sets is undone
    monkeypatch.delenv("JAVA_HOME")
    assert find_java(str(tmp_path / "jdk")) == java
    import os

    assert os.environ["JAVA_HOME"] == str(tmp_path / "jdk")
