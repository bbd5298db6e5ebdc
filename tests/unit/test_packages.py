"""setup.cfg lists the packages the wheel ships (semula.migrations is the top-level migrations/):
a package added to the tree and not to the list would be missing from the wheel."""

from __future__ import annotations

import configparser
from pathlib import Path

from setuptools import find_namespace_packages

ROOT = Path(__file__).resolve().parents[2]


def test_setup_cfg_lists_every_package_of_the_tree_and_the_migrations():
    options = configparser.ConfigParser()
    options.read(ROOT / "setup.cfg")
    listed = options["options"]["packages"].split()
    mapped = dict(
        line.replace(" ", "").split("=") for line in options["options"]["package_dir"].split("\n") if line
    )
    found = find_namespace_packages(
        str(ROOT), include=["semula", "semula.*", "answerer", "answerer.*"], exclude=["*.__pycache__"]
    )
    assert sorted(listed) == sorted([*found, "semula.migrations"])
    assert mapped == {"semula.migrations": "migrations"}
    assert sorted((ROOT / "migrations").glob("0001_*.sql"))
