"""Finding Java before Spark tries to: one clear line instead of a launcher's stack trace."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rt_appliance.errors import UsageError

__all__ = ["INSTALL_HINT", "find_java"]

INSTALL_HINT = "install Java 17: apt-get install openjdk-17-jre-headless"


def find_java(java_home: str | None = None) -> Path:
    """The ``java`` Spark will run: ``$JAVA_HOME/bin/java`` (``java_home`` first), else the
    one on PATH. Sets ``JAVA_HOME`` from ``java_home`` when given."""
    home = java_home or os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise UsageError(
                f"Spark needs Java, and {java} is not there (JAVA_HOME); {INSTALL_HINT}"
            )
        if java_home:
            os.environ["JAVA_HOME"] = java_home
        return java
    found = shutil.which("java")
    if found is None:
        raise UsageError(f"Spark needs Java, and there is no java on PATH; {INSTALL_HINT}")
    return Path(found)
